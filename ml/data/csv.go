package data

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
)

// maxCSVClasses bounds the label values a CSV file may use.
const maxCSVClasses = 1 << 16

// DecodeCSV reads CSV records of the form feature,...,feature,label. The
// label is a non-negative integer class index; every record must have the
// same number of fields, at least two. A first line whose fields are not all
// numbers is taken as a header and skipped. name is used in errors.
func DecodeCSV(name string, r io.Reader) (*Dataset, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	cr.TrimLeadingSpace = true
	cr.Comment = '#'
	var (
		d      = &Dataset{}
		dim    = -1
		maxY   = 0
		lineNo = 0
	)
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, &FormatError{name, fmt.Sprintf("line %d: %v", pe.Line, pe.Err)}
			}
			return nil, &FormatError{name, err.Error()}
		}
		lineNo++
		line, _ := cr.FieldPos(0)
		if len(rec) < 2 {
			return nil, &FormatError{name, fmt.Sprintf("line %d: %d field(s), want features followed by a label", line, len(rec))}
		}
		if dim < 0 && lineNo == 1 && !allNumeric(rec) {
			continue // header
		}
		if dim < 0 {
			dim = len(rec) - 1
		} else if len(rec)-1 != dim {
			return nil, &FormatError{name, fmt.Sprintf("line %d: %d features, earlier lines have %d", line, len(rec)-1, dim)}
		}
		for i, f := range rec[:dim] {
			v, err := strconv.ParseFloat(strings.TrimSpace(f), 32)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, &FormatError{name, fmt.Sprintf("line %d, field %d: %q is not a finite number", line, i+1, f)}
			}
			d.X = append(d.X, float32(v))
		}
		lf := strings.TrimSpace(rec[dim])
		y, err := strconv.Atoi(lf)
		if err != nil || y < 0 || y >= maxCSVClasses {
			return nil, &FormatError{name, fmt.Sprintf("line %d: label %q is not a class index in [0,%d)", line, lf, maxCSVClasses)}
		}
		d.Y = append(d.Y, y)
		maxY = max(maxY, y)
	}
	if len(d.Y) == 0 {
		return nil, &FormatError{name, "no records"}
	}
	d.Shape = Shape{1, dim, 1}
	d.Classes = max(2, maxY+1)
	return d, nil
}

func allNumeric(rec []string) bool {
	for _, f := range rec {
		if _, err := strconv.ParseFloat(strings.TrimSpace(f), 64); err != nil {
			return false
		}
	}
	return true
}

// LoadCSV reads a CSV file (see DecodeCSV).
func LoadCSV(path string) (*Dataset, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open csv: %w", err)
	}
	defer f.Close()
	return DecodeCSV(path, f)
}
