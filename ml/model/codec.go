package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"

	"github.com/nzcfed/nzc/internal/atomicfile"
)

// The saved-model format, version 1 (all integers little-endian):
//
//	magic    "NZCMODEL"                      8 bytes
//	version  uint16 = 1
//	kind     uint8 length, then the kind     (softmax, mlp or cnn)
//	spec     uint32 length, then JSON        the full Spec
//	tensors  uint32 count, then per tensor: uint32 length, length×float32
//	crc      uint32 CRC-32 (IEEE) of everything before it
const (
	magic         = "NZCMODEL"
	FormatVersion = 1
	maxSpecJSON   = 1 << 16
)

// ErrFormat reports a saved model that cannot be decoded.
var ErrFormat = errors.New("not a valid saved model")

// ErrVersion reports a saved model written in a format version this build cannot read.
var ErrVersion = errors.New("unsupported saved-model format version")

// MarshalBinary encodes the network (architecture and weights).
func (n *Network) MarshalBinary() ([]byte, error) {
	spec, err := json.Marshal(n.spec)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(magic)
	b.Write(binary.LittleEndian.AppendUint16(nil, FormatVersion))
	b.WriteByte(byte(len(n.spec.Kind)))
	b.WriteString(n.spec.Kind)
	b.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(spec))))
	b.Write(spec)
	b.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(n.ps))))
	buf := make([]byte, 0, 4096)
	for _, p := range n.ps {
		b.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(p.w))))
		for i, v := range p.w {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			if len(buf) == cap(buf) || i == len(p.w)-1 {
				b.Write(buf)
				buf = buf[:0]
			}
		}
	}
	b.Write(binary.LittleEndian.AppendUint32(nil, crc32.ChecksumIEEE(b.Bytes())))
	return b.Bytes(), nil
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) next(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b) < n {
		r.err = fmt.Errorf("%w: truncated in %s", ErrFormat, what)
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) u32(what string) uint32 {
	b := r.next(4, what)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

// Unmarshal decodes a network written by MarshalBinary. It checks the magic
// number, the format version, the checksum and that every tensor has the
// size the architecture needs.
func Unmarshal(b []byte) (*Network, error) {
	if len(b) < len(magic)+2 || string(b[:len(magic)]) != magic {
		return nil, fmt.Errorf("%w: missing the %q header", ErrFormat, magic)
	}
	if v := binary.LittleEndian.Uint16(b[len(magic):]); v != FormatVersion {
		return nil, fmt.Errorf("%w: file has version %d, this build reads version %d; retrain or use a matching build", ErrVersion, v, FormatVersion)
	}
	if len(b) < len(magic)+2+4 {
		return nil, fmt.Errorf("%w: truncated", ErrFormat)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch (the file is corrupt)", ErrFormat)
	}
	r := &reader{b: body[len(magic)+2:]}
	kl := r.next(1, "kind length")
	if r.err != nil {
		return nil, r.err
	}
	kind := string(r.next(int(kl[0]), "kind"))
	sl := r.u32("spec length")
	if sl > maxSpecJSON {
		return nil, fmt.Errorf("%w: specification of %d bytes is too long", ErrFormat, sl)
	}
	specJSON := r.next(int(sl), "specification")
	count := r.u32("tensor count")
	if r.err != nil {
		return nil, r.err
	}
	var spec Spec
	dec := json.NewDecoder(bytes.NewReader(specJSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		return nil, fmt.Errorf("%w: specification: %v", ErrFormat, err)
	}
	if spec.Kind != kind {
		return nil, fmt.Errorf("%w: header says model kind %q, specification says %q", ErrFormat, kind, spec.Kind)
	}
	if _, err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	// Check the sizes before allocating anything as large as the model.
	sizes := make([]int, 0, 16)
	total := 0
	{
		probe := *r
		for range min(count, 1024) {
			l := probe.u32("tensor length")
			sizes = append(sizes, int(l))
			total += int(l)
			probe.next(4*int(l), "tensor data")
		}
		if probe.err != nil {
			return nil, probe.err
		}
		if len(probe.b) != 0 {
			return nil, fmt.Errorf("%w: %d unexpected bytes after the tensors", ErrFormat, len(probe.b))
		}
	}
	want, _ := spec.Validate()
	if int(count) != len(sizes) || total != want {
		return nil, fmt.Errorf("%w: %d tensors with %d values, the %s architecture needs %d values", ErrFormat, count, total, spec, want)
	}
	n, err := New(spec, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if len(n.ps) != len(sizes) {
		return nil, fmt.Errorf("%w: %d tensors, the architecture has %d", ErrFormat, len(sizes), len(n.ps))
	}
	for i, p := range n.ps {
		l := r.u32("tensor length")
		if int(l) != len(p.w) {
			return nil, fmt.Errorf("%w: tensor %d has %d values, want %d", ErrFormat, i, l, len(p.w))
		}
		raw := r.next(4*int(l), "tensor data")
		for j := range p.w {
			v := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:]))
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, fmt.Errorf("%w: tensor %d holds a non-finite value", ErrFormat, i)
			}
			p.w[j] = v
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	return n, nil
}

// Save writes the network to path atomically (temporary file, then rename).
func (n *Network) Save(path string) error {
	b, err := n.MarshalBinary()
	if err != nil {
		return err
	}
	return WriteFileAtomic(path, b)
}

// Load reads a network saved with Save.
func Load(path string) (*Network, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load model: %w", err)
	}
	n, err := Unmarshal(b)
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", path, err)
	}
	return n, nil
}

// WriteFileAtomic writes b to path durably (readable by its owner only):
// readers never see a half-written file, and once it returns the file
// survives a crash.
func WriteFileAtomic(path string, b []byte) error {
	return atomicfile.Write(path, b, 0o600, true)
}
