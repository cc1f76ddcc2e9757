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
	conn  *quicnet.Holder
	next  int // the address dial tries first; changed only under conn's lock
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

// dial connects to the first auditor that answers, from the one at next.
func (l *Client) dial(ctx context.Context) (*quicnet.Conn, error) {
	var errs []error
	for range l.addrs {
		addr := l.addrs[l.next%len(l.addrs)]
		c, err := quicnet.Dial(ctx, addr, l.cfg, crypto.RoleAuditor)
		if err == nil {
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
	var last error
	for range 2 * len(l.addrs) {
		c, err := l.conn.Get(ctx)
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
func (l *Client) Close() error { return l.conn.Close() }
