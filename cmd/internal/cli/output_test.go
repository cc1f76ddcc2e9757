package cli

import (
	"errors"
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
	for _, tc := range []struct {
		format, want string
	}{
		{FormatText, "3 things\n"},
		{FormatJSON, "{\n  \"n\": 3\n}\n"},
	} {
		var b strings.Builder
		if err := Print(&b, tc.format, v, Textf("%d things\n", v.N)); err != nil || b.String() != tc.want {
			t.Errorf("--format %s: %q, %v; want %q", tc.format, b.String(), err, tc.want)
		}
	}
	if err := Print(failingWriter{}, FormatText, v, Textf("%d things\n", v.N)); !errors.Is(err, errWrite) {
		t.Errorf("a failed write: %v, want it returned", err)
	}
}
