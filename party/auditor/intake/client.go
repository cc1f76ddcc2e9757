package intake

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// Client submits commands to the auditors' intake over QUIC: the
// aggregator's, and a hospital's own account commands (nzc-teacher cap).
// Any auditor takes a command (followers forward it to the raft leader);
// when one is unreachable the next is tried, and when one answers
// not-leader naming one of the client's addresses, that one.
type Client struct {
	cfg   quicnet.Config
	addrs []string
	conn  *quicnet.Holder
	next  int // the address dial tries first; changed only under conn's lock
	// addrOf is the address each held connection was dialled at.
	addrOf sync.Map // *quicnet.Conn → string
}

// NewClient returns a client of the auditors at addrs.
func NewClient(cfg quicnet.Config, addrs []string) (*Client, error) {
	if len(addrs) == 0 {
		return nil, errors.New("intake: no auditor address configured")
	}
	l := &Client{cfg: cfg, addrs: addrs}
	l.conn = quicnet.NewHolder(l.dial)
	return l, nil
}

// dial connects to the first auditor that answers, from the one at next;
// when none does, its error is an *UnavailableError naming each it tried.
func (l *Client) dial(ctx context.Context) (*quicnet.Conn, error) {
	failed := &UnavailableError{Addrs: l.addrs}
	for range l.addrs {
		addr := l.addrs[l.next%len(l.addrs)]
		c, err := quicnet.Dial(ctx, addr, l.cfg, crypto.RoleAuditor)
		if err == nil {
			l.addrOf.Store(c, addr)
			context.AfterFunc(c.Context(), func() { l.addrOf.Delete(c) })
			return c, nil
		}
		failed.add(addr, false, err)
		l.next++
		if ctx.Err() != nil {
			break
		}
	}
	return nil, failed
}

// UnavailableError is what a Client's call returns when no auditor gave
// an answer: each auditor it tried, whether it was reached, and what came
// back. The ones not named were not tried before the call's context ended.
type UnavailableError struct {
	Addrs []string // every configured auditor address
	Tried []AuditorAttempt
}

// AuditorAttempt is one auditor's part in a failed call.
type AuditorAttempt struct {
	Addr    string
	Reached bool // a connection was made; the auditor did not answer in time, or refused for now
	Err     error
}

func (e *UnavailableError) add(addr string, reached bool, err error) {
	e.Tried = append(e.Tried, AuditorAttempt{Addr: addr, Reached: reached, Err: err})
}

func (e *UnavailableError) Error() string {
	var parts []string
	seen := map[string]bool{}
	for _, a := range e.Tried {
		seen[a.Addr] = true
		if a.Reached {
			parts = append(parts, fmt.Sprintf("auditor %s was reached but gave no answer (%v)", a.Addr, a.Err))
		} else {
			parts = append(parts, fmt.Sprintf("auditor %s could not be reached (%v)", a.Addr, a.Err))
		}
	}
	for _, addr := range e.Addrs {
		if !seen[addr] {
			parts = append(parts, fmt.Sprintf("auditor %s was not tried before the time ran out", addr))
		}
	}
	return "no auditor answered: " + strings.Join(parts, "; ")
}

// Unwrap returns the errors of the attempts.
func (e *UnavailableError) Unwrap() []error {
	out := make([]error, len(e.Tried))
	for i, a := range e.Tried {
		out[i] = a.Err
	}
	return out
}

// drop closes c and moves on: to the auditor at leader when it is one of
// the client's addresses, otherwise to the next.
func (l *Client) drop(c *quicnet.Conn, leader string) {
	l.conn.Drop(c, func() {
		l.next++
		if i := slices.Index(l.addrs, leader); leader != "" && i >= 0 {
			l.next = i
		}
	})
}

// call invokes req on an auditor, moving to the next auditor when the
// connection fails or the auditor says it cannot serve now, and to the
// leader when the auditor names it.
func (l *Client) call(ctx context.Context, req, resp proto.Message) error {
	tried := &UnavailableError{Addrs: l.addrs}
	for range 2 * len(l.addrs) {
		c, err := l.conn.Get(ctx)
		if err != nil {
			var failed *UnavailableError
			if errors.As(err, &failed) {
				tried.Tried = append(tried.Tried, failed.Tried...)
			}
			return tried
		}
		v, _ := l.addrOf.Load(c)
		addr, _ := v.(string)
		if err != nil {
			return err
		}
		err = c.Invoke(ctx, req, resp)
		if err == nil {
			return nil
		}
		var pe *protocol.Error
		if errors.As(err, &pe) && !pe.Code.Retryable() {
			return err
		}
		tried.add(addr, true, err)
		var leader string
		if pe != nil && pe.Code == protocol.CodeNotLeader {
			leader = pe.LeaderAddress
		}
		l.drop(c, leader)
		if ctx.Err() != nil {
			break
		}
	}
	return tried
}

// Submit proposes a signed command.
func (l *Client) Submit(ctx context.Context, cmd []byte) (*nzcpb.LedgerResult, error) {
	var res nzcpb.LedgerResult
	if err := l.call(ctx, &nzcpb.LedgerSubmit{Command: cmd}, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Budget reads hospitals' budgets.
func (l *Client) Budget(ctx context.Context, req *nzcpb.BudgetRequest) (*nzcpb.BudgetResponse, error) {
	var res nzcpb.BudgetResponse
	if err := l.call(ctx, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Close closes the connection to the auditors.
func (l *Client) Close() error { return l.conn.Close() }
