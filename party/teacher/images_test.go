package teacher

import (
	"bytes"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestTrainOnImageFolder trains teachers on a folder of PNG images per
// class, dark images in class 0 and bright ones in class 1, and checks
// that they learned to tell them apart.
func TestTrainOnImageFolder(t *testing.T) {
	dir := t.TempDir()
	const n = 40
	for i := range n {
		class := i % 2
		img := image.NewGray(image.Rect(0, 0, 4, 4))
		for p := range img.Pix {
			img.Pix[p] = uint8(10 + 200*class + (i*7+p)%30)
		}
		var b bytes.Buffer
		if err := png.Encode(&b, img); err != nil {
			t.Fatal(err)
		}
		cdir := filepath.Join(dir, strconv.Itoa(class))
		if err := os.MkdirAll(cdir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cdir, "img-"+strconv.Itoa(i)+".png"), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	models := filepath.Join(t.TempDir(), "models")
	m, err := Train(t.Context(), TrainOptions{Data: dir, Teachers: 2, Model: "softmax", Epochs: 3, Seed: 1, Models: models})
	if err != nil {
		t.Fatal(err)
	}
	if m.Examples != n || m.Classes != 2 || m.Shape.Size() != 16 {
		t.Fatalf("manifest %+v", m)
	}
	e, err := LoadEnsemble(models)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, 2*16)
	for p := range 16 {
		x[p], x[16+p] = 15.0/255, 225.0/255
	}
	votes, err := e.Votes(t.Context(), x)
	if err != nil {
		t.Fatal(err)
	}
	if votes[0][0] != 2 || votes[1][1] != 2 {
		t.Fatalf("votes %v: want both teachers to call the dark image 0 and the bright one 1", votes)
	}
}
