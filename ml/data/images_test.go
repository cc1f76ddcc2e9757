package data

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// grayPNG encodes a w×h gray image whose pixel (x, y) is v+x+y.
func grayPNG(t testing.TB, w, h int, v uint8) []byte {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.SetGray(x, y, color.Gray{Y: v + uint8(x+y)})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// rgbPNG encodes a w×h image of one opaque colour.
func rgbPNG(t testing.TB, w, h int, c color.RGBA) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.SetRGBA(x, y, c)
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func grayJPEG(t testing.TB, w, h int, v uint8) []byte {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = v
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 100}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// writeTree writes files (path relative to dir → content; a path ending in
// "/" is an empty directory) and returns dir.
func writeTree(t *testing.T, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadImageFolder(t *testing.T) {
	red := color.RGBA{R: 255, A: 255}
	for _, tc := range []struct {
		name    string
		files   map[string][]byte
		shape   Shape
		classes int
		labels  []int
		first   []float32 // the first example's first features
		tol     float32
	}{
		{
			name: "gray PNG by class index",
			files: map[string][]byte{
				"0/a.png": grayPNG(t, 3, 2, 10), "0/b.png": grayPNG(t, 3, 2, 20),
				"2/a.PNG": grayPNG(t, 3, 2, 30), ".DS_Store": []byte("x"), "2/.hidden": []byte("x"),
			},
			shape: Shape{2, 3, 1}, classes: 3, labels: []int{0, 0, 2},
			first: []float32{10.0 / 255, 11.0 / 255, 12.0 / 255, 11.0 / 255},
		},
		{
			name:  "colour makes three channels for every image",
			files: map[string][]byte{"0/a.png": grayPNG(t, 2, 2, 0), "1/b.png": rgbPNG(t, 2, 2, red)},
			shape: Shape{2, 2, 3}, classes: 2, labels: []int{0, 1},
			first: []float32{0, 0, 0, 1.0 / 255, 1.0 / 255, 1.0 / 255},
		},
		{
			name:  "JPEG",
			files: map[string][]byte{"0/a.jpg": grayJPEG(t, 8, 8, 200), "1/b.jpeg": grayJPEG(t, 8, 8, 50)},
			shape: Shape{8, 8, 1}, classes: 2, labels: []int{0, 1},
			first: []float32{200.0 / 255}, tol: 2.0 / 255,
		},
		{
			name: "class names from classes.txt",
			files: map[string][]byte{ClassesFile: []byte("normal\npneumonia\ncovid\n"),
				"pneumonia/x.png": grayPNG(t, 1, 1, 1), "normal/y.png": grayPNG(t, 1, 1, 2)},
			shape: Shape{1, 1, 1}, classes: 3, labels: []int{0, 1},
			first: []float32{2.0 / 255},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := LoadImageFolder(writeTree(t, tc.files))
			if err != nil {
				t.Fatal(err)
			}
			if d.Shape != tc.shape || d.Classes != tc.classes || !equalInts(d.Y, tc.labels) {
				t.Fatalf("got %v, %d classes, labels %v; want %v, %d, %v", d.Shape, d.Classes, d.Y, tc.shape, tc.classes, tc.labels)
			}
			for i, want := range tc.first {
				if got := d.X[i]; got < want-tc.tol-1e-7 || got > want+tc.tol+1e-7 {
					t.Fatalf("feature %d = %v, want %v", i, got, want)
				}
			}
		})
	}
}

func TestLoadImageFolderRefuses(t *testing.T) {
	good := grayPNG(t, 2, 2, 0)
	for _, tc := range []struct {
		name    string
		files   map[string][]byte
		file    string // the file the error names, relative to the folder
		mention string
	}{
		{"corrupt PNG", map[string][]byte{"0/a.png": good, "1/b.png": good[:20]}, "1/b.png", "not a valid PNG"},
		{"JPEG named .png", map[string][]byte{"0/a.png": good, "1/b.png": grayJPEG(t, 2, 2, 0)}, "1/b.png", "not a valid PNG"},
		{"another size", map[string][]byte{"0/a.png": good, "1/b.png": grayPNG(t, 3, 2, 0)}, "1/b.png", "resize"},
		{"not an image", map[string][]byte{"0/a.png": good, "0/notes.txt": []byte("x")}, "0/notes.txt", "not a PNG"},
		{"a file beside the classes", map[string][]byte{"0/a.png": good, "labels.csv": []byte("x")}, "labels.csv", "one directory per class"},
		{"a class not named by index", map[string][]byte{"0/a.png": good, "cat/b.png": good}, "cat", "class index"},
		{"a class index written twice", map[string][]byte{"1/a.png": good, "01/b.png": good}, "01", "class index"},
		{"a class not in classes.txt", map[string][]byte{ClassesFile: []byte("a\nb\n"), "a/x.png": good, "c/y.png": good}, "c", "not listed"},
		{"a class listed twice", map[string][]byte{ClassesFile: []byte("a\na\n"), "a/x.png": good}, ClassesFile, "twice"},
		{"an empty class", map[string][]byte{"0/a.png": good, "1/": nil}, "1", "without images"},
		{"a directory in a class", map[string][]byte{"0/a.png": good, "0/more/b.png": good}, "0/more", "inside a class directory"},
		{"too large", map[string][]byte{"0/a.png": grayPNG(t, maxImageSide+1, 1, 0)}, "0/a.png", "pixels on each side"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeTree(t, tc.files)
			d, err := LoadImageFolder(dir)
			var fe *FormatError
			if d != nil || !errors.As(err, &fe) || fe.File != filepath.Join(dir, filepath.FromSlash(tc.file)) || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("got %v, %v; want a FormatError naming %s and saying %q", d, err, tc.file, tc.mention)
			}
		})
	}
	t.Run("no classes", func(t *testing.T) {
		d, err := LoadImageFolder(writeTree(t, map[string][]byte{".keep": nil}))
		if d != nil || !errors.Is(err, ErrNotFound) {
			t.Fatalf("got %v, %v; want ErrNotFound", d, err)
		}
	})
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzDecodeImage feeds arbitrary bytes to the image decoders: an error
// names the file, and a decoded image yields one value per pixel and
// channel, each in [0, 1].
func FuzzDecodeImage(f *testing.F) {
	f.Add(grayPNG(f, 2, 2, 0), true)
	f.Add(rgbPNG(f, 2, 1, color.RGBA{G: 9, A: 255}), true)
	f.Add(grayJPEG(f, 8, 8, 1), false)
	f.Fuzz(func(t *testing.T, b []byte, isPNG bool) {
		name := "x.jpg"
		if isPNG {
			name = "x.png"
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(b))
		if !isPNG {
			cfg, err = jpeg.DecodeConfig(bytes.NewReader(b))
		}
		if err != nil || cfg.Width*cfg.Height > 1<<16 {
			return // LoadImageFolder checks the header's size before decoding
		}
		img, err := decodeImage(name, b)
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) || fe.File != name {
				t.Fatalf("error %v does not name %s", err, name)
			}
			return
		}
		for _, ch := range []int{1, 3} {
			x := appendPixels(nil, img, ch)
			if len(x) != img.Bounds().Dx()*img.Bounds().Dy()*ch {
				t.Fatalf("%d values for %v with %d channels", len(x), img.Bounds(), ch)
			}
			for _, v := range x {
				if !(v >= 0 && v <= 1) {
					t.Fatalf("value %v outside [0, 1]", v)
				}
			}
		}
	})
}

func TestLoadDir(t *testing.T) {
	idx := t.TempDir()
	writeIDXDir(t, idx, false, 10, 5)
	images := writeTree(t, map[string][]byte{"0/a.png": grayPNG(t, 2, 2, 0), "1/b.png": grayPNG(t, 2, 2, 9), "1/c.png": grayPNG(t, 2, 2, 9)})
	for _, tc := range []struct {
		name, dir, part string
		want            int // examples; -1: an error
	}{
		{"idx train", idx, "train", 10},
		{"idx test", idx, "test", 5},
		{"image folder", images, "train", 3},
		{"image folder, test part", images, "test", 3},
		{"bad part", idx, "validation", -1},
		{"neither", t.TempDir(), "train", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := LoadDir(tc.dir, tc.part)
			if tc.want < 0 {
				if d != nil || err == nil {
					t.Fatalf("got %v, %v; want an error", d, err)
				}
				return
			}
			if err != nil || d.Len() != tc.want {
				t.Fatalf("got %v, %v; want %d examples", d, err, tc.want)
			}
		})
	}
	if _, err := LoadDir(t.TempDir(), "train"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "idx") || !strings.Contains(err.Error(), "images") {
		t.Fatalf("empty directory: %v; want ErrNotFound naming both layouts", err)
	}
}

// Load reads every format from its path alone, and names the formats for a
// path that is none of them.
func TestLoad(t *testing.T) {
	idx := t.TempDir()
	writeIDXDir(t, idx, true, 10, 5)
	images := writeTree(t, map[string][]byte{"0/a.png": grayPNG(t, 2, 2, 0), "1/b.png": grayPNG(t, 2, 2, 9)})
	other := t.TempDir()
	csv := filepath.Join(other, "records.csv")
	txt := filepath.Join(other, "records.txt")
	for _, p := range []string{csv, txt} {
		if err := os.WriteFile(p, []byte("age,bp,label\n1,2,0\n3,4.5,2\n5,6,1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, path, part string
		want             int   // examples
		err              error // or the error it matches
	}{
		{"idx train", idx, "train", 10, nil},
		{"idx test", idx, "test", 5, nil},
		{"image folder", images, "test", 2, nil},
		{"csv", csv, "test", 3, nil},
		{"another extension", txt, "train", 0, ErrUnknownFormat},
		{"missing", filepath.Join(other, "absent"), "train", 0, fs.ErrNotExist},
		{"empty directory", t.TempDir(), "train", 0, ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Load(tc.path, tc.part)
			if tc.err != nil {
				if d != nil || !errors.Is(err, tc.err) {
					t.Fatalf("got %v, %v; want an error matching %v", d, err, tc.err)
				}
				return
			}
			if err != nil || d.Len() != tc.want {
				t.Fatalf("got %v, %v; want %d examples", d, err, tc.want)
			}
		})
	}
}
