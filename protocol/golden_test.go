package protocol

import (
	"bytes"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/nzcfed/nzc/internal/golden"
)

// encodeGolden returns the bytes a fixture is sent as: a whole frame for
// frame messages, the bare body for sealed plaintexts.
func encodeGolden(t *testing.T, m proto.Message) []byte {
	t.Helper()
	body, err := Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	typ, err := TypeOf(m)
	if err != nil {
		return body
	}
	return AppendFrame(nil, typ, body)
}

// hexLines formats b as 32 bytes of hex per line, so diffs stay readable.
func hexLines(b []byte) []byte {
	var sb strings.Builder
	for len(b) > 0 {
		n := min(32, len(b))
		sb.WriteString(hex.EncodeToString(b[:n]))
		sb.WriteByte('\n')
		b = b[n:]
	}
	return []byte(sb.String())
}

func TestGoldenEncoding(t *testing.T) {
	for _, fx := range fixtures() {
		t.Run(fx.name, func(t *testing.T) {
			got := encodeGolden(t, fx.msg)
			text := golden.Check(t, filepath.Join("testdata", fx.name+".golden"), hexLines(got))
			want, err := hex.DecodeString(strings.ReplaceAll(string(text), "\n", ""))
			if err != nil {
				t.Fatal(err)
			}
			// The golden bytes decode back to the fixture.
			decoded := fx.msg.ProtoReflect().New().Interface()
			if typ, err := TypeOf(fx.msg); err == nil {
				ft, body, err := NewFrameReader(bytes.NewReader(want), 0).Next()
				if err != nil || ft != typ {
					t.Fatalf("frame: %v %v", ft, err)
				}
				if err := DecodeInto(ft, body, decoded); err != nil {
					t.Fatal(err)
				}
			} else if err := DecodePlain(want, decoded); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(decoded, fx.msg) {
				t.Fatalf("decoded %v, want %v", decoded, fx.msg)
			}
		})
	}
}
