package intake

import (
	"context"
	"errors"
	"fmt"
	"slices"

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

	mu   chanMutex
	conn *quicnet.Conn
	next int
}

// chanMutex is a mutex whose Lock respects a context.
type chanMutex chan struct{}

func (m chanMutex) lock(ctx context.Context) error {
	select {
	case m <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (m chanMutex) unlock() { <-m }

// NewClient returns a client of the auditors at addrs.
func NewClient(cfg quicnet.Config, addrs []string) (*Client, error) {
	if len(addrs) == 0 {
		return nil, errors.New("intake: no auditor address configured")
	}
	return &Client{cfg: cfg, addrs: addrs, mu: make(chanMutex, 1)}, nil
}

func (l *Client) connect(ctx context.Context) (*quicnet.Conn, error) {
	if err := l.mu.lock(ctx); err != nil {
		return nil, err
	}
	defer l.mu.unlock()
	if l.conn != nil && l.conn.Err() == nil {
		return l.conn, nil
	}
	var errs []error
	for range l.addrs {
		addr := l.addrs[l.next%len(l.addrs)]
		c, err := quicnet.Dial(ctx, addr, l.cfg, crypto.RoleAuditor)
		if err == nil {
			l.conn = c
			return c, nil
		}
		errs = append(errs, err)
		l.next++
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("no auditor reachable: %w", errors.Join(errs...))
}

// drop closes c and moves on: to the auditor at leader when it is one of
// the client's addresses, otherwise to the next.
func (l *Client) drop(c *quicnet.Conn, leader string) {
	_ = l.mu.lock(context.Background())
	defer l.mu.unlock()
	if l.conn == c {
		_ = c.Close()
		l.conn = nil
		l.next++
		if i := slices.Index(l.addrs, leader); leader != "" && i >= 0 {
			l.next = i
		}
	}
}

// call invokes req on an auditor, moving to the next auditor when the
// connection fails or the auditor says it cannot serve now, and to the
// leader when the auditor names it.
func (l *Client) call(ctx context.Context, req, resp proto.Message) error {
	var last error
	for range 2 * len(l.addrs) {
		c, err := l.connect(ctx)
		if err != nil {
			return err
		}
		err = c.Invoke(ctx, req, resp)
		if err == nil {
			return nil
		}
		last = err
		var pe *protocol.Error
		if errors.As(err, &pe) && !pe.Code.Retryable() {
			return err
		}
		var leader string
		if pe != nil && pe.Code == protocol.CodeNotLeader {
			leader = pe.LeaderAddress
		}
		l.drop(c, leader)
		if ctx.Err() != nil {
			break
		}
	}
	return last
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
func (l *Client) Close() error {
	_ = l.mu.lock(context.Background())
	defer l.mu.unlock()
	if l.conn != nil {
		return l.conn.Close()
	}
	return nil
}
