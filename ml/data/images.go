package data

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ClassesFile, in an image folder, names its classes, one per line: the
// class on line i has index i-1. Without it, class directories are named by
// their index (0, 1, …).
const ClassesFile = "classes.txt"

// Bounds of what an image folder may hold, so that a stray huge file or a
// crafted header cannot exhaust memory.
const (
	maxImageSide   = 4096
	maxImageValues = 1 << 31 // features of the whole data set
	maxImageFile   = 64 << 20
	maxImageClass  = 1 << 16
)

// imageFile is one image of an image folder and its class.
type imageFile struct {
	path  string
	class int
}

// LoadImageFolder reads a folder of images, one directory per class, each
// holding PNG (.png) or JPEG (.jpg, .jpeg) files; names starting with a dot
// are ignored. Class directories are named by class index (0, 1, …), or by
// the names listed in classes.txt, so that every party numbers the classes
// alike. Every image must have the same width and height. Features are the
// pixels scaled to [0, 1], row-major and channel-last: one channel when
// every image is grayscale, else three (red, green, blue; a transparent
// pixel counts as black, the image composited over black). Examples are
// ordered by class, then by file name.
//
// Any file that is not such an image, or that does not decode, is an error
// (a *FormatError naming the file and why), and nothing is returned: a data
// set is loaded whole or not at all. A directory without class directories
// yields an error matching ErrNotFound.
func LoadImageFolder(dir string) (*Dataset, error) {
	files, classes, err := listImageFolder(dir)
	if err != nil {
		return nil, err
	}
	// First the headers: shape and channels, before any pixel is decoded.
	shape := Shape{Channels: 1}
	for i, f := range files {
		cfg, err := decodeImageConfig(f.path)
		if err != nil {
			return nil, err
		}
		if cfg.Width < 1 || cfg.Height < 1 || cfg.Width > maxImageSide || cfg.Height > maxImageSide {
			return nil, &FormatError{f.path, fmt.Sprintf("%dx%d pixels; images must be 1 to %d pixels on each side", cfg.Width, cfg.Height, maxImageSide)}
		}
		if i == 0 {
			shape.Height, shape.Width = cfg.Height, cfg.Width
		} else if cfg.Height != shape.Height || cfg.Width != shape.Width {
			return nil, &FormatError{f.path, fmt.Sprintf("%dx%d pixels (width x height), but %s is %dx%d; resize the images to one size",
				cfg.Width, cfg.Height, files[0].path, shape.Width, shape.Height)}
		}
		if !isGray(cfg.ColorModel) {
			shape.Channels = 3
		}
	}
	if uint64(len(files))*uint64(shape.Size()) > maxImageValues {
		return nil, &FormatError{dir, fmt.Sprintf("%d images of %v are more than %d values", len(files), shape, maxImageValues)}
	}
	d := &Dataset{X: make([]float32, 0, len(files)*shape.Size()), Y: make([]int, 0, len(files)), Shape: shape, Classes: classes}
	for _, f := range files {
		img, err := decodeImageFile(f.path)
		if err != nil {
			return nil, err
		}
		if b := img.Bounds(); b.Dx() != shape.Width || b.Dy() != shape.Height {
			return nil, &FormatError{f.path, fmt.Sprintf("decodes to %dx%d pixels, but its header says %dx%d", b.Dx(), b.Dy(), shape.Width, shape.Height)}
		}
		d.X = appendPixels(d.X, img, shape.Channels)
		d.Y = append(d.Y, f.class)
	}
	if err := d.Validate(); err != nil {
		return nil, &FormatError{dir, err.Error()}
	}
	return d, nil
}

// listImageFolder returns the images of dir with their classes, and the
// number of classes.
func listImageFolder(dir string) ([]imageFile, int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, fmt.Errorf("image folder: %w", err)
	}
	names, err := readClassNames(dir)
	if err != nil {
		return nil, 0, err
	}
	type classDir struct {
		name  string
		class int
	}
	var dirs []classDir
	maxClass := 0
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(dir, name)
		switch {
		case strings.HasPrefix(name, "."), name == ClassesFile && !e.IsDir():
			continue
		case !e.IsDir():
			return nil, 0, &FormatError{path, "a file beside the class directories; an image folder holds one directory per class (and classes.txt)"}
		}
		c, err := classIndex(name, names)
		if err != nil {
			return nil, 0, &FormatError{path, err.Error()}
		}
		dirs = append(dirs, classDir{name, c})
		maxClass = max(maxClass, c)
	}
	if len(dirs) == 0 {
		return nil, 0, fmt.Errorf("%w: %s holds neither the four idx files nor class directories of PNG or JPEG images", ErrNotFound, dir)
	}
	slices.SortFunc(dirs, func(a, b classDir) int { return a.class - b.class })
	var files []imageFile
	for _, cd := range dirs {
		cdir := filepath.Join(dir, cd.name)
		imgs, err := os.ReadDir(cdir)
		if err != nil {
			return nil, 0, fmt.Errorf("image folder: %w", err)
		}
		n := 0
		for _, e := range imgs { // ReadDir sorts by name
			path := filepath.Join(cdir, e.Name())
			switch {
			case strings.HasPrefix(e.Name(), "."):
				continue
			case e.IsDir():
				return nil, 0, &FormatError{path, "a directory inside a class directory; put the class's images directly in it"}
			case imageFormat(e.Name()) == "":
				return nil, 0, &FormatError{path, "not a PNG (.png) or JPEG (.jpg, .jpeg) file; remove it or convert it"}
			}
			files = append(files, imageFile{path, cd.class})
			n++
		}
		if n == 0 {
			return nil, 0, &FormatError{cdir, "a class directory without images; remove it or add its images"}
		}
	}
	classes := max(2, maxClass+1)
	if names != nil {
		classes = max(2, len(names))
	}
	return files, classes, nil
}

// readClassNames reads dir's classes.txt, or returns nil when there is none.
func readClassNames(dir string) ([]string, error) {
	path := filepath.Join(dir, ClassesFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("image folder: %w", err)
	}
	defer f.Close()
	var names []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for line := 1; sc.Scan(); line++ {
		name := strings.TrimSpace(sc.Text())
		switch {
		case name == "" || strings.HasPrefix(name, "."):
			return nil, &FormatError{path, fmt.Sprintf("line %d: %q is not a class directory name", line, sc.Text())}
		case seen[name]:
			return nil, &FormatError{path, fmt.Sprintf("line %d: class %q is listed twice", line, name)}
		}
		seen[name] = true
		names = append(names, name)
	}
	if err := sc.Err(); err != nil {
		return nil, &FormatError{path, err.Error()}
	}
	if len(names) > maxImageClass {
		return nil, &FormatError{path, fmt.Sprintf("%d classes, at most %d", len(names), maxImageClass)}
	}
	return names, nil
}

// classIndex is the class of a class directory: its line in classes.txt
// (names), or its name read as an index.
func classIndex(name string, names []string) (int, error) {
	if names != nil {
		if i := slices.Index(names, name); i >= 0 {
			return i, nil
		}
		return 0, fmt.Errorf("class directory %q is not listed in %s", name, ClassesFile)
	}
	c, err := strconv.Atoi(name)
	if err != nil || c < 0 || c >= maxImageClass || strconv.Itoa(c) != name {
		return 0, fmt.Errorf("class directory %q is not a class index (0, 1, …); name it by its class index, or list the class names in %s", name, ClassesFile)
	}
	return c, nil
}

// imageFormat is "png" or "jpeg" by the file's extension, or "".
func imageFormat(name string) string {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".png":
		return "png"
	case ".jpg", ".jpeg":
		return "jpeg"
	}
	return ""
}

// readImageFile reads an image file whole, within maxImageFile bytes.
func readImageFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &FormatError{path, err.Error()}
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxImageFile+1))
	if err != nil {
		return nil, &FormatError{path, err.Error()}
	}
	if len(b) > maxImageFile {
		return nil, &FormatError{path, fmt.Sprintf("larger than %d bytes", maxImageFile)}
	}
	return b, nil
}

func decodeImageConfig(path string) (image.Config, error) {
	b, err := readImageFile(path)
	if err != nil {
		return image.Config{}, err
	}
	var cfg image.Config
	switch imageFormat(path) {
	case "png":
		cfg, err = png.DecodeConfig(bytes.NewReader(b))
	default:
		cfg, err = jpeg.DecodeConfig(bytes.NewReader(b))
	}
	if err != nil {
		return image.Config{}, &FormatError{path, fmt.Sprintf("not a valid %s image: %v", strings.ToUpper(imageFormat(path)), err)}
	}
	return cfg, nil
}

func decodeImageFile(path string) (image.Image, error) {
	b, err := readImageFile(path)
	if err != nil {
		return nil, err
	}
	return decodeImage(path, b)
}

// decodeImage decodes b as the format path's extension names.
func decodeImage(path string, b []byte) (image.Image, error) {
	var (
		img image.Image
		err error
	)
	switch imageFormat(path) {
	case "png":
		img, err = png.Decode(bytes.NewReader(b))
	case "jpeg":
		img, err = jpeg.Decode(bytes.NewReader(b))
	default:
		return nil, &FormatError{path, "not a PNG (.png) or JPEG (.jpg, .jpeg) file"}
	}
	if err != nil {
		return nil, &FormatError{path, fmt.Sprintf("not a valid %s image: %v", strings.ToUpper(imageFormat(path)), err)}
	}
	return img, nil
}

// isGray reports whether a color model holds gray levels only.
func isGray(m color.Model) bool { return m == color.GrayModel || m == color.Gray16Model }

// appendPixels appends img's pixels to x, scaled to [0, 1], row-major and
// channel-last, with one (gray) or three (RGB) channels.
func appendPixels(x []float32, img image.Image, channels int) []float32 {
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for xx := b.Min.X; xx < b.Max.X; xx++ {
			c := img.At(xx, y)
			if channels == 1 {
				g := color.Gray16Model.Convert(c).(color.Gray16)
				x = append(x, float32(g.Y)/0xffff)
				continue
			}
			r, g, bl, _ := c.RGBA()
			x = append(x, float32(r)/0xffff, float32(g)/0xffff, float32(bl)/0xffff)
		}
	}
	return x
}

// ErrUnknownFormat reports a data path that is neither a directory nor a
// CSV file.
var ErrUnknownFormat = errors.New("not a data format nzc reads")

// Load loads labelled data from path, whatever its format: a directory
// (LoadDir: the part, "train" or "test", of an idx directory, or a folder
// of images per class) or a CSV file (LoadCSV). Every command that reads
// data reads it here.
func Load(path, part string) (*Dataset, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w (run scripts/fetch-data.sh for MNIST, or give a directory of idx files, a folder of images per class or a CSV file)", err)
	}
	switch {
	case st.IsDir():
		return LoadDir(path, part)
	case strings.HasSuffix(path, ".csv"):
		return LoadCSV(path)
	}
	return nil, fmt.Errorf("%w: %s: want a directory of idx files, a folder of images per class or a .csv file", ErrUnknownFormat, path)
}

// LoadDir loads a directory of labelled data: the part ("train" or "test")
// of an idx directory, or, when the directory holds no idx files, an image
// folder (LoadImageFolder), all of which is the data whatever the part.
func LoadDir(dir, part string) (*Dataset, error) {
	if part != "train" && part != "test" {
		return nil, fmt.Errorf("data part %q: want train or test", part)
	}
	s, err := LoadIDXDir(dir)
	switch {
	case errors.Is(err, ErrNotFound):
		return LoadImageFolder(dir)
	case err != nil:
		return nil, err
	case part == "train":
		return s.Train, nil
	}
	return s.Test, nil
}
