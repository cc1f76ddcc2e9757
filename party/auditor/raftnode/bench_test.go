package raftnode

import (
	"context"
	"testing"
	"time"

	"github.com/nzcfed/nzc/party/auditor/internal/auditortest"
)

// BenchmarkSubmitTLSCluster measures committed submissions per second and
// the commit latency on a 3-node cluster on loopback mutual TLS with
// durable bbolt stores. Each operation is one Submit acknowledged after a
// majority has made it durable and the leader has applied it; 64 submitters
// run concurrently, so raft commits them in groups.
func BenchmarkSubmitTLSCluster(b *testing.B) {
	for _, via := range []string{"leader", "follower"} {
		b.Run("via-"+via, func(b *testing.B) {
			c := newTLSCluster(b, 3)
			leader := -1
			auditortest.WaitFor(b, 10*time.Second, "a leader", func() bool {
				for i, n := range c.nodes {
					if n.Status().State == "Leader" {
						leader = i
						return true
					}
				}
				return false
			})
			target := c.nodes[leader]
			if via == "follower" {
				target = c.nodes[(leader+1)%3]
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			auditortest.SubmitParallel(ctx, b, target, func(i uint64) []byte {
				return chainCmd(i, "charge-0123456789abcdef0123456789abcdef")
			}, nil)
		})
	}
}
