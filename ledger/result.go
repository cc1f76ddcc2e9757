package ledger

import (
	"encoding/binary"
	"fmt"
	"math"
)

// resultFixedLen is the length of a Result's encoding before its two strings.
const resultFixedLen = 8 + 2 + 8 + 3*8

// EncodeResult encodes a Result for the trip from the auditor that applied
// the command back to whoever submitted it (raft carries it as the apply
// result):
//
//	index u64 | status u8 | code u8 | original u64 | 3 × float64 bits
//	  | uvarint len | subject | uvarint len | message
//
// The encoding is not part of the Merkle log: entries never hold it.
func EncodeResult(r Result) []byte {
	b := make([]byte, 0, resultFixedLen+2*binary.MaxVarintLen64+len(r.Subject)+len(r.Message))
	b = binary.BigEndian.AppendUint64(b, r.Index)
	b = append(b, byte(r.Status), byte(r.Code))
	b = binary.BigEndian.AppendUint64(b, r.Original)
	for _, f := range []float64{r.SpentEpsilon, r.ChargeEpsilon, r.CapEpsilon} {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(f))
	}
	b = binary.AppendUvarint(b, uint64(len(r.Subject)))
	b = append(b, r.Subject...)
	b = binary.AppendUvarint(b, uint64(len(r.Message)))
	return append(b, r.Message...)
}

// DecodeResult is the inverse of EncodeResult. Bytes that are not exactly
// one encoded Result (truncated, trailing bytes, a length not in its
// shortest form) give an error wrapping ErrMalformed.
func DecodeResult(b []byte) (Result, error) {
	var r Result
	if len(b) < resultFixedLen {
		return r, fmt.Errorf("%w: result of %d bytes is shorter than its %d fixed bytes", ErrMalformed, len(b), resultFixedLen)
	}
	r.Index = binary.BigEndian.Uint64(b)
	r.Status, r.Code = Status(b[8]), Code(b[9])
	r.Original = binary.BigEndian.Uint64(b[10:])
	for i, f := range []*float64{&r.SpentEpsilon, &r.ChargeEpsilon, &r.CapEpsilon} {
		*f = math.Float64frombits(binary.BigEndian.Uint64(b[18+8*i:]))
	}
	b = b[resultFixedLen:]
	str := func(field string) (string, error) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return "", fmt.Errorf("%w: result %s is truncated", ErrMalformed, field)
		}
		if k != len(binary.AppendUvarint(nil, n)) {
			return "", fmt.Errorf("%w: result %s length is not minimally encoded", ErrMalformed, field)
		}
		s := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return s, nil
	}
	var err error
	if r.Subject, err = str("subject"); err != nil {
		return r, err
	}
	if r.Message, err = str("message"); err != nil {
		return r, err
	}
	if len(b) != 0 {
		return r, fmt.Errorf("%w: %d trailing bytes after a result", ErrMalformed, len(b))
	}
	return r, nil
}
