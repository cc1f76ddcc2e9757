package experiment

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/nzcfed/nzc/ml/model"
)

// votesMagic starts a cached votes file; the version follows it.
const votesMagic = "NZCVOTES"

// votesFormat changes whenever the file layout or the key's meaning does.
const votesFormat = 1

// votesKey is everything that determines an ensemble's predictions on the
// student's examples: the teachers (training data, architecture, training
// settings, seeds, partition) and the examples they label.
type votesKey struct {
	Format   int               `json:"format"`
	Model    int               `json:"model_format"`
	Train    string            `json:"train"`
	Test     string            `json:"test"`
	Spec     model.Spec        `json:"spec"`
	Training model.TrainConfig `json:"training"`
	Seed     uint64            `json:"seed"`
	Teachers int               `json:"teachers"`
}

func (k votesKey) path(dir string) string {
	b, err := json.Marshal(k)
	if err != nil {
		panic("experiment: votes key does not encode: " + err.Error())
	}
	s := sha256.Sum256(b)
	return filepath.Join(dir, "votes-"+hex.EncodeToString(s[:])+".bin")
}

// errVotesFormat reports a cached votes file that cannot be read.
var errVotesFormat = errors.New("malformed cached votes")

// encodeVotes writes preds (preds[t][q], one row per teacher, classes below
// 65,536) as magic, version, teachers, examples, then every prediction as a
// little-endian uint16, teacher by teacher.
func encodeVotes(w io.Writer, preds [][]int) error {
	bw := bufio.NewWriter(w)
	bw.WriteString(votesMagic)
	n := 0
	if len(preds) > 0 {
		n = len(preds[0])
	}
	var hdr [12]byte
	binary.LittleEndian.PutUint32(hdr[0:], votesFormat)
	binary.LittleEndian.PutUint32(hdr[4:], uint32(len(preds)))
	binary.LittleEndian.PutUint32(hdr[8:], uint32(n))
	bw.Write(hdr[:])
	var b [2]byte
	for t, p := range preds {
		if len(p) != n {
			return fmt.Errorf("%w: teacher %d has %d predictions, want %d", errVotesFormat, t, len(p), n)
		}
		for _, c := range p {
			if c < 0 || c > 0xffff {
				return fmt.Errorf("%w: class %d", errVotesFormat, c)
			}
			binary.LittleEndian.PutUint16(b[:], uint16(c))
			bw.Write(b[:])
		}
	}
	return bw.Flush()
}

// decodeVotes reads what encodeVotes wrote; every class must be below
// classes.
func decodeVotes(b []byte, classes int) ([][]int, error) {
	if len(b) < len(votesMagic)+12 || !bytes.HasPrefix(b, []byte(votesMagic)) {
		return nil, fmt.Errorf("%w: no header", errVotesFormat)
	}
	b = b[len(votesMagic):]
	if v := binary.LittleEndian.Uint32(b); v != votesFormat {
		return nil, fmt.Errorf("%w: version %d, want %d", errVotesFormat, v, votesFormat)
	}
	k, n := int(binary.LittleEndian.Uint32(b[4:])), int(binary.LittleEndian.Uint32(b[8:]))
	b = b[12:]
	if k == 0 || n == 0 || uint64(len(b)) != 2*uint64(k)*uint64(n) {
		return nil, fmt.Errorf("%w: %d bytes for %d teachers × %d examples", errVotesFormat, len(b), k, n)
	}
	out := make([][]int, k)
	flat := make([]int, k*n)
	for t := range out {
		out[t] = flat[t*n : (t+1)*n : (t+1)*n]
		for q := range out[t] {
			c := int(binary.LittleEndian.Uint16(b[2*(t*n+q):]))
			if c >= classes {
				return nil, fmt.Errorf("%w: class %d of %d", errVotesFormat, c, classes)
			}
			out[t][q] = c
		}
	}
	return out, nil
}

// loadVotes returns the cached predictions at path, or nil when there are
// none (a file that cannot be read is treated as absent).
func loadVotes(path string, classes, teachers, examples int) [][]int {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	p, err := decodeVotes(b, classes)
	if err != nil || len(p) != teachers || len(p[0]) != examples {
		return nil
	}
	return p
}

// saveVotes writes preds to path through a temporary file and a rename.
func saveVotes(path string, preds [][]int) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("votes cache: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".votes-*")
	if err != nil {
		return fmt.Errorf("votes cache: %w", err)
	}
	defer os.Remove(f.Name())
	if err := encodeVotes(f, preds); err != nil {
		f.Close()
		return fmt.Errorf("votes cache: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("votes cache: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("votes cache: %w", err)
	}
	return nil
}
