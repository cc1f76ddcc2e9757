package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

type failingWriter struct{}

var errWrite = errors.New("disk full")

func (failingWriter) Write([]byte) (int, error) { return 0, errWrite }

func TestPrint(t *testing.T) {
	v := struct {
		N int `json:"n"`
	}{3}
	lines := Text(func(b *strings.Builder) {
		for i := range v.N {
			fmt.Fprintf(b, "thing %d\n", i)
		}
	})
	for _, tc := range []struct {
		name, format string
		text         func(io.Writer) error
		want         string
	}{
		{"Textf", FormatText, Textf("%d things\n", v.N), "3 things\n"},
		{"Text", FormatText, lines, "thing 0\nthing 1\nthing 2\n"},
		{"json", FormatJSON, lines, "{\n  \"n\": 3\n}\n"},
	} {
		var b strings.Builder
		if err := Print(&b, tc.format, v, tc.text); err != nil || b.String() != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, b.String(), err, tc.want)
		}
		if tc.format == FormatText {
			if err := Print(failingWriter{}, tc.format, v, tc.text); !errors.Is(err, errWrite) {
				t.Errorf("%s, a failed write: %v, want it returned", tc.name, err)
			}
		}
	}
}
