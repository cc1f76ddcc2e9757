package protocol

import (
	"bytes"
	"testing"
)

func BenchmarkFrameWriteRead(b *testing.B) {
	for _, size := range []int{64, 64 << 10, 1 << 20} {
		body := bytes.Repeat([]byte{7}, size)
		b.Run(byteSize(size), func(b *testing.B) {
			var buf bytes.Buffer
			fw, fr := NewFrameWriter(&buf, 0), NewFrameReader(&buf, 0)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				if err := fw.WriteFrame(TypeLedgerSubmit, body); err != nil {
					b.Fatal(err)
				}
				if _, _, err := fr.Next(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkMarshalLabelResponse(b *testing.B) {
	m := fixtureMsg("label-response")
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		var err error
		if buf, err = AppendMarshal(buf[:0], m); err != nil {
			b.Fatal(err)
		}
	}
}

func byteSize(n int) string {
	switch {
	case n >= 1<<20:
		return itoa(n>>20) + "MiB"
	case n >= 1<<10:
		return itoa(n>>10) + "KiB"
	}
	return itoa(n) + "B"
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}
