package privacy

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"

	"github.com/nzcfed/nzc/mechanism"
)

// ErrHistograms reports an unreadable histogram file.
var ErrHistograms = errors.New("histograms must be a JSON array of arrays of non-negative integers, one array per query")

// QueryError names the query whose histogram is bad.
type QueryError struct {
	Query int // 0-based
	Err   error
}

func (e *QueryError) Error() string { return fmt.Sprintf("query %d: %v", e.Query, e.Err) }
func (e *QueryError) Unwrap() error { return e.Err }

// ReadHistograms reads the histograms from path ("-" for stdin).
func ReadHistograms(path string, stdin io.Reader) ([]mechanism.Histogram, error) {
	var r io.Reader
	if path == "-" {
		r = stdin
	} else {
		fh, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("reading histograms: %w", err)
		}
		defer fh.Close()
		r = fh
	}
	return DecodeHistograms(bufio.NewReader(r))
}

// DecodeHistograms decodes a JSON array of histograms, one per query, each
// an array of non-negative vote counts.
func DecodeHistograms(r io.Reader) ([]mechanism.Histogram, error) {
	var raw []json.RawMessage
	dec := json.NewDecoder(r)
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHistograms, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the array", ErrHistograms)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("%w: the array is empty", ErrHistograms)
	}
	hs := make([]mechanism.Histogram, len(raw))
	for i, m := range raw {
		var h []int
		if err := json.Unmarshal(m, &h); err != nil {
			return nil, &QueryError{Query: i, Err: fmt.Errorf("%w: %v", ErrHistograms, err)}
		}
		if err := mechanism.Histogram(h).Validate(0, math.MaxInt); err != nil {
			return nil, &QueryError{Query: i, Err: err}
		}
		hs[i] = h
	}
	return hs, nil
}

// Text is x for a reader: "inf (unbounded)", or six significant digits.
func Text(x float64) string {
	if math.IsInf(x, 1) {
		return "inf (unbounded)"
	}
	return strconv.FormatFloat(x, 'g', 6, 64)
}
