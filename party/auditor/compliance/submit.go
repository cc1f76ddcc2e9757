package compliance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

// Proposer replicates one ledger command (*raftnode.Node): it returns the
// state machine's encoded result and the raft index it was applied at.
type Proposer interface {
	Submit(ctx context.Context, cmd []byte) ([]byte, uint64, error)
}

// SubmitRequest is the body of POST /v1/admin/submit.
type SubmitRequest struct {
	Command []byte `json:"command"` // the encoded, signed ledger command
}

// maxSubmitBody bounds a submitted administrative command.
const maxSubmitBody = 64 << 10

// submit is POST /v1/admin/submit: an administrator's signed ledger command
// (a suspension or reinstatement of a hospital, made by nzc init suspend),
// proposed to the ledger. The command carries its own authority — the
// ledger checks the administrator's signature — so any auditor's operator
// may submit it; a command that is not an administrator's, or that this
// auditor's replica would refuse, is answered so and never proposed.
func (a *API) submit(w http.ResponseWriter, r *http.Request, _ crypto.Peer) error {
	if a.Proposer == nil {
		return refuse(http.StatusServiceUnavailable, "this auditor does not propose commands through its compliance API; submit to another auditor")
	}
	var req SubmitRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxSubmitBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return refuse(http.StatusBadRequest, "the body must be JSON {\"command\": base64} of at most "+strconv.Itoa(maxSubmitBody)+" bytes: "+err.Error())
	}
	cmd := req.Command
	c, err := ledger.DecodeCommand(cmd)
	if err != nil {
		return refuse(http.StatusBadRequest, "the body is not a ledger command: "+err.Error())
	}
	if !administrative(a.Ledger, c) {
		return refuse(http.StatusForbidden, fmt.Sprintf("a %s signed by %s is not an administrator's command: only those are submitted here (hospitals and the aggregator submit their own through the intake); nothing was proposed", c.Body.Kind(), c.Signer))
	}
	if res := a.Ledger.Check(cmd); res.Status != ledger.StatusAccepted {
		return refuse(http.StatusConflict, fmt.Sprintf("the ledger would refuse the %s (%s): %s; nothing was proposed", c.Body.Kind(), res.Code, res.Message))
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	data, _, err := a.Proposer.Submit(ctx, cmd)
	var np *raftnode.NotProposedError
	var rej *raftnode.RejectedError
	switch {
	case errors.As(err, &np):
		data = np.Refused()
	case errors.As(err, &rej):
		return refuse(http.StatusConflict, fmt.Sprintf("the ledger refused the %s at entry %d: %v", c.Body.Kind(), rej.RefusedAt(), rej.Err))
	case err != nil:
		return adminError("submit", err)
	}
	res, err := ledger.DecodeResult(data)
	if err != nil {
		return fmt.Errorf("the ledger's answer to the %s does not decode: %w", c.Body.Kind(), err)
	}
	if res.Status == ledger.StatusRefused {
		return refuse(http.StatusConflict, fmt.Sprintf("the ledger refused the %s (%s): %s", c.Body.Kind(), res.Code, res.Message))
	}
	return writeJSON(w, res)
}

// administrative reports whether c is signed by a party the ledger
// registered as an administrator.
func administrative(st *ledger.State, c ledger.Command) bool {
	for _, p := range st.Parties() {
		if p.ID == c.Signer {
			return p.Role == ledger.RoleAdmin
		}
	}
	return false
}

// Submit is POST /v1/admin/submit: an administrator's signed ledger command
// (nzc init suspend), proposed to the ledger; it returns the ledger's
// result. A command the ledger refuses is an error naming the refusal.
func (c *Client) Submit(ctx context.Context, cmd []byte) (ledger.Result, error) {
	b, err := c.do(ctx, http.MethodPost, "/v1/admin/submit", SubmitRequest{Command: cmd})
	if err != nil {
		return ledger.Result{}, err
	}
	var res ledger.Result
	if err := json.Unmarshal(b, &res); err != nil {
		return ledger.Result{}, fmt.Errorf("POST %s/v1/admin/submit: the answer is not a ledger result: %w", c.base, err)
	}
	return res, nil
}
