package protocol

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/nzcfed/nzc/protocol/nzcpb"
)

func FuzzFrameReader(f *testing.F) {
	for _, fx := range fixtures() {
		body, _ := Marshal(fx.msg)
		f.Add(AppendFrame(nil, TypeAck, body))
	}
	f.Add([]byte{0x80})
	f.Add(bytes.Repeat([]byte{0xff}, 20))
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 1 << 12
		fr := NewFrameReader(bytes.NewReader(data), limit)
		consumed := 0
		for {
			typ, body, err := fr.Next()
			if err != nil {
				if err != io.EOF && !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrFrameTooLarge) &&
					!errors.Is(err, ErrUnknownType) && !errors.Is(err, ErrMalformedHeader) {
					t.Fatalf("untyped error %v", err)
				}
				if err == io.EOF && consumed != len(data) {
					t.Fatalf("EOF after %d of %d bytes", consumed, len(data))
				}
				return
			}
			if len(body) > limit || !typ.Known() {
				t.Fatalf("accepted %v frame of %d bytes", typ, len(body))
			}
			// The body is the last bytes the reader consumed from the input.
			next := len(data) - fr.r.(*bytes.Reader).Len()
			if next-len(body) < consumed || !bytes.Equal(data[next-len(body):next], body) {
				t.Fatalf("body is not the input's bytes")
			}
			consumed = next
			// Decoding the body never panics.
			_, _ = Decode(typ, body)
		}
	})
}

// fuzzMessage checks that decoding body as message type t either fails with
// a typed error or yields a valid message whose deterministic re-encoding
// decodes to an equal message.
func fuzzMessage(f *testing.F, t MsgType, newMsg func() proto.Message) {
	for _, fx := range fixtures() {
		body, _ := Marshal(fx.msg)
		f.Add(body)
	}
	f.Fuzz(func(tt *testing.T, body []byte) {
		var m proto.Message
		var err error
		if t != 0 {
			m, err = Decode(t, body)
		} else {
			m = newMsg()
			err = DecodePlain(body, m)
		}
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				tt.Fatalf("untyped error %v", err)
			}
			return
		}
		re, err := Marshal(m)
		if err != nil {
			tt.Fatal(err)
		}
		again := newMsg()
		if err := DecodePlain(re, again); err != nil {
			tt.Fatalf("re-encoding does not decode: %v", err)
		}
		if !proto.Equal(m, again) {
			tt.Fatalf("round trip changed the message: %v != %v", m, again)
		}
	})
}

func FuzzDecodeError(f *testing.F) {
	fuzzMessage(f, TypeError, func() proto.Message { return &nzcpb.Error{} })
}
func FuzzDecodeHello(f *testing.F) {
	fuzzMessage(f, TypeHello, func() proto.Message { return &nzcpb.Hello{} })
}
func FuzzDecodeAck(f *testing.F) {
	fuzzMessage(f, TypeAck, func() proto.Message { return &nzcpb.Ack{} })
}
func FuzzDecodeQueryBatch(f *testing.F) {
	fuzzMessage(f, TypeQueryBatch, func() proto.Message { return &nzcpb.QueryBatch{} })
}
func FuzzDecodeVoteBatch(f *testing.F) {
	fuzzMessage(f, TypeVoteBatch, func() proto.Message { return &nzcpb.VoteBatch{} })
}
func FuzzDecodeLabelRequest(f *testing.F) {
	fuzzMessage(f, TypeLabelRequest, func() proto.Message { return &nzcpb.LabelRequest{} })
}
func FuzzDecodeLabelResponse(f *testing.F) {
	fuzzMessage(f, TypeLabelResponse, func() proto.Message { return &nzcpb.LabelResponse{} })
}
func FuzzDecodeBudgetRequest(f *testing.F) {
	fuzzMessage(f, TypeBudgetRequest, func() proto.Message { return &nzcpb.BudgetRequest{} })
}
func FuzzDecodeBudgetResponse(f *testing.F) {
	fuzzMessage(f, TypeBudgetResponse, func() proto.Message { return &nzcpb.BudgetResponse{} })
}
func FuzzDecodeLedgerSubmit(f *testing.F) {
	fuzzMessage(f, TypeLedgerSubmit, func() proto.Message { return &nzcpb.LedgerSubmit{} })
}
func FuzzDecodeLedgerResult(f *testing.F) {
	fuzzMessage(f, TypeLedgerResult, func() proto.Message { return &nzcpb.LedgerResult{} })
}
func FuzzDecodeFeatures(f *testing.F) {
	fuzzMessage(f, 0, func() proto.Message { return &nzcpb.Features{} })
}
func FuzzDecodeHistograms(f *testing.F) {
	fuzzMessage(f, 0, func() proto.Message { return &nzcpb.Histograms{} })
}
func FuzzDecodeLabels(f *testing.F) {
	fuzzMessage(f, 0, func() proto.Message { return &nzcpb.Labels{} })
}
