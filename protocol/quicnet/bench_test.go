package quicnet

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/protocol"
)

// BenchmarkCall measures one request/response round trip on loopback.
func BenchmarkCall(b *testing.B) {
	f := newFederation(b)
	for _, size := range []int{64, 1 << 20} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			scfg, ccfg := Config{CA: f.ca.Cert, Credential: f.creds["auditor-1"]}, Config{CA: f.ca.Cert, Credential: f.creds["aggregator"]}
			l, err := Listen("127.0.0.1:0", scfg)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				for {
					c, err := l.Accept(ctx)
					if err != nil {
						return
					}
					go c.Serve(ctx, echoMux(crypto.RoleAggregator))
				}
			}()
			c, err := Dial(ctx, l.Addr().String(), ccfg, crypto.RoleAuditor)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			body := bytes.Repeat([]byte{1}, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := c.Call(ctx, protocol.TypeLedgerSubmit, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
