package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
)

// FormatError reports input that cannot be decoded: which file, and what is wrong with it.
type FormatError struct {
	File    string // the file (or a description of the input)
	Problem string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%s: %s", e.File, e.Problem)
}

// ErrNotFound reports that a data directory lacks one of the files it needs.
var ErrNotFound = errors.New("data file not found")

// idx element types (the third byte of the magic number).
const (
	idxUint8   = 0x08
	idxInt8    = 0x09
	idxInt16   = 0x0B
	idxInt32   = 0x0C
	idxFloat32 = 0x0D
	idxFloat64 = 0x0E
)

// maxIdxElements bounds what a header may announce (2^31 values) so that a
// corrupt header cannot make the decoder allocate without limit.
const maxIdxElements = 1 << 31

// IDX is a decoded idx file: its dimensions and its values in row-major order.
type IDX struct {
	Type byte  // element type code
	Dims []int // e.g. [60000 28 28] for MNIST images
	Data []float64
}

// elemSize is the width in bytes of an idx element type, or 0 if unknown.
func elemSize(t byte) int {
	switch t {
	case idxUint8, idxInt8:
		return 1
	case idxInt16:
		return 2
	case idxInt32, idxFloat32:
		return 4
	case idxFloat64:
		return 8
	}
	return 0
}

// DecodeIDX decodes an idx file held in b (gzipped or not). name is used in errors.
func DecodeIDX(name string, b []byte) (*IDX, error) {
	if len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, &FormatError{name, "bad gzip header: " + err.Error()}
		}
		// An idx file is at most 4 + 4*255 header bytes plus maxIdxElements*8 values.
		raw, err := io.ReadAll(io.LimitReader(zr, 8*maxIdxElements+1024+1))
		if err != nil {
			return nil, &FormatError{name, "corrupt gzip stream: " + err.Error()}
		}
		b = raw
	}
	if len(b) < 4 {
		return nil, &FormatError{name, fmt.Sprintf("truncated: %d bytes, an idx header needs at least 4", len(b))}
	}
	if b[0] != 0 || b[1] != 0 {
		return nil, &FormatError{name, fmt.Sprintf("not an idx file: magic %02x%02x%02x%02x should start with 0000", b[0], b[1], b[2], b[3])}
	}
	typ, ndims := b[2], int(b[3])
	size := elemSize(typ)
	if size == 0 {
		return nil, &FormatError{name, fmt.Sprintf("unknown idx element type 0x%02x", typ)}
	}
	if ndims == 0 {
		return nil, &FormatError{name, "idx file declares zero dimensions"}
	}
	hdr := 4 + 4*ndims
	if len(b) < hdr {
		return nil, &FormatError{name, fmt.Sprintf("truncated header: %d bytes, %d dimensions need %d", len(b), ndims, hdr)}
	}
	dims := make([]int, ndims)
	total := 1
	for i := range dims {
		d := binary.BigEndian.Uint32(b[4+4*i:])
		dims[i] = int(d)
		if d == 0 {
			total = 0
			continue
		}
		if total > 0 && uint64(total)*uint64(d) > maxIdxElements {
			return nil, &FormatError{name, fmt.Sprintf("dimensions %v announce more than %d values", dims[:i+1], maxIdxElements)}
		}
		if total > 0 {
			total *= int(d)
		}
	}
	body := b[hdr:]
	if want := total * size; len(body) != want {
		if len(body) < want {
			return nil, &FormatError{name, fmt.Sprintf("truncated: dimensions %v need %d bytes of data, file has %d", dims, want, len(body))}
		}
		return nil, &FormatError{name, fmt.Sprintf("%d unexpected bytes after the data for dimensions %v", len(body)-want, dims)}
	}
	out := &IDX{Type: typ, Dims: dims, Data: make([]float64, total)}
	for i := range out.Data {
		switch typ {
		case idxUint8:
			out.Data[i] = float64(body[i])
		case idxInt8:
			out.Data[i] = float64(int8(body[i]))
		case idxInt16:
			out.Data[i] = float64(int16(binary.BigEndian.Uint16(body[2*i:])))
		case idxInt32:
			out.Data[i] = float64(int32(binary.BigEndian.Uint32(body[4*i:])))
		case idxFloat32:
			out.Data[i] = float64(math.Float32frombits(binary.BigEndian.Uint32(body[4*i:])))
		case idxFloat64:
			out.Data[i] = math.Float64frombits(binary.BigEndian.Uint64(body[8*i:]))
		}
	}
	return out, nil
}

// ReadIDXFile reads and decodes one idx file (gzipped or not).
func ReadIDXFile(path string) (*IDX, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read idx file: %w", err)
	}
	return DecodeIDX(path, b)
}

// FromIDX builds a data set from an images file and a labels file.
// Images of element type uint8 are scaled to [0,1]; other types are kept as
// they are. Images may have dimensions [n], [n h], [n h w] or [n h w c].
// Labels must be integers in [0,255]; the number of classes is max label + 1
// (at least 2), unless classes > 0 fixes it.
func FromIDX(imagesName string, images *IDX, labelsName string, labels *IDX, classes int) (*Dataset, error) {
	if len(labels.Dims) != 1 {
		return nil, &FormatError{labelsName, fmt.Sprintf("labels must have one dimension, found %v", labels.Dims)}
	}
	n := images.Dims[0]
	if labels.Dims[0] != n {
		return nil, &FormatError{labelsName, fmt.Sprintf("%d labels for %d images in %s", labels.Dims[0], n, imagesName)}
	}
	shape := Shape{1, 1, 1}
	switch len(images.Dims) {
	case 1:
	case 2:
		shape.Width = images.Dims[1]
	case 3:
		shape.Height, shape.Width = images.Dims[1], images.Dims[2]
	case 4:
		shape.Height, shape.Width, shape.Channels = images.Dims[1], images.Dims[2], images.Dims[3]
	default:
		return nil, &FormatError{imagesName, fmt.Sprintf("images have %d dimensions, at most 4 are supported", len(images.Dims))}
	}
	if shape.Size() == 0 {
		return nil, &FormatError{imagesName, fmt.Sprintf("images have an empty dimension: %v", images.Dims)}
	}
	d := &Dataset{X: make([]float32, len(images.Data)), Y: make([]int, n), Shape: shape, Classes: classes}
	scale := 1.0
	if images.Type == idxUint8 {
		scale = 1.0 / 255
	}
	for i, v := range images.Data {
		d.X[i] = float32(v * scale)
	}
	maxLabel := 0
	for i, v := range labels.Data {
		if v != math.Trunc(v) || v < 0 || v > 255 {
			return nil, &FormatError{labelsName, fmt.Sprintf("label %d is %v, want an integer in [0,255]", i, v)}
		}
		d.Y[i] = int(v)
		maxLabel = max(maxLabel, int(v))
	}
	if classes <= 0 {
		d.Classes = max(2, maxLabel+1)
	} else if maxLabel >= classes {
		return nil, &FormatError{labelsName, fmt.Sprintf("label %d but only %d classes", maxLabel, classes)}
	}
	return d, nil
}

// Split is a training set and a test set.
type Split struct {
	Train, Test *Dataset
}

// idxNames lists the accepted file names for each part of an idx directory.
func idxNames() [4][]string {
	return [4][]string{
		{"train-images-idx3-ubyte", "train-images.idx3-ubyte"},
		{"train-labels-idx1-ubyte", "train-labels.idx1-ubyte"},
		{"t10k-images-idx3-ubyte", "t10k-images.idx3-ubyte"},
		{"t10k-labels-idx1-ubyte", "t10k-labels.idx1-ubyte"},
	}
}

func findIDX(dir string, names []string) (string, error) {
	for _, n := range names {
		for _, suffix := range []string{"", ".gz"} {
			p := filepath.Join(dir, n+suffix)
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("%w: %s (or .gz) in %s; run scripts/fetch-data.sh for MNIST or point --data-dir at a directory holding the four idx files", ErrNotFound, names[0], dir)
}

// LoadIDXPair loads one images file and its labels file.
func LoadIDXPair(imagesPath, labelsPath string) (*Dataset, error) {
	img, err := ReadIDXFile(imagesPath)
	if err != nil {
		return nil, err
	}
	lab, err := ReadIDXFile(labelsPath)
	if err != nil {
		return nil, err
	}
	return FromIDX(imagesPath, img, labelsPath, lab, 0)
}

// LoadIDXDir loads a directory holding the four standard idx files
// (train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
// t10k-labels-idx1-ubyte, each optionally gzipped with a .gz suffix), as
// MNIST and Fashion-MNIST are distributed.
func LoadIDXDir(dir string) (*Split, error) {
	var paths [4]string
	for i, names := range idxNames() {
		p, err := findIDX(dir, names)
		if err != nil {
			return nil, err
		}
		paths[i] = p
	}
	var parts [4]*IDX
	for i, p := range paths {
		x, err := ReadIDXFile(p)
		if err != nil {
			return nil, err
		}
		parts[i] = x
	}
	train, err := FromIDX(paths[0], parts[0], paths[1], parts[1], 0)
	if err != nil {
		return nil, err
	}
	test, err := FromIDX(paths[2], parts[2], paths[3], parts[3], 0)
	if err != nil {
		return nil, err
	}
	if train.Shape != test.Shape {
		return nil, &FormatError{paths[2], fmt.Sprintf("test images are %v but training images are %v", test.Shape, train.Shape)}
	}
	c := max(train.Classes, test.Classes)
	train.Classes, test.Classes = c, c
	return &Split{Train: train, Test: test}, nil
}
