// Package compliance is an auditor's compliance API: the read side of the
// privacy ledger for compliance officers, hospitals and auditors, and the
// cluster administration of the auditor's own operator, served over HTTPS
// with federation client certificates.
//
// Who may do what is decided by the role and id of the client certificate's
// nzc://role/id URI (the TLS layer has already verified the certificate
// against the federation CA):
//
//	compliance, auditor  every read endpoint
//	hospital             aggregates only: status, peers (without keys),
//	                     accounts, the cosigned checkpoint, proofs, and the
//	                     charges naming itself with their receipts; not the
//	                     entries or the export, which carry every party's
//	                     keys and every batch's details
//	student              the same aggregates but no charges: the hospitals'
//	                     accounts it plans its queries with, which the
//	                     aggregator's budget read also gives it (one policy
//	                     for students on either path)
//	this auditor itself  (its own certificate, nzc://auditor/<its id>) also
//	                     POST /v1/admin/join, /v1/admin/remove,
//	                     /v1/admin/snapshot
//	any auditor          POST /v1/admin/remove-signed, carrying the
//	                     signatures of a majority of the other auditors;
//	                     POST /v1/admin/submit, carrying a ledger command
//	                     the federation administrator signed
//	anyone else          403, naming the roles that may
package compliance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

// Cluster is the auditor the API reports on and administers: its
// *raftnode.Node with the ledger's cosigning (auditor.New assembles it).
type Cluster interface {
	Status() raftnode.Status
	Ready() error
	CosignCheckpoint(ctx context.Context) ([]byte, error)
	Join(ctx context.Context, id, addr string) error
	Remove(ctx context.Context, id string) error
	// RemoveSigned removes auditor id on a quorum-signed Removal (its
	// encoding in proof), which the cluster checks against the ledger's
	// auditors before raft membership changes.
	RemoveSigned(ctx context.Context, id string, proof []byte) error
	SaveSnapshot(ctx context.Context) (raftnode.SnapshotFile, error)
}

// Limits of /v1/entries.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// cosignTimeout bounds gathering the other auditors' signatures.
const cosignTimeout = 5 * time.Second

// API serves the compliance endpoints of one auditor.
type API struct {
	Cluster Cluster
	Ledger  *ledger.State
	// Self is this auditor's id: only a client presenting nzc://auditor/<Self>
	// may administer the cluster through this API.
	Self string
	// Proposer proposes the administrator's signed commands of POST
	// /v1/admin/submit; nil refuses them.
	Proposer Proposer
}

// Status is GET /v1/status.
type Status struct {
	Auditor raftnode.Status `json:"auditor"`
	Ready   bool            `json:"ready"`
	NotYet  string          `json:"not_ready,omitempty"` // why not ready
	Origin  string          `json:"origin"`
	Size    int64           `json:"size"` // entries applied here
	Root    tlog.Hash       `json:"root"`
}

// PeerInfo is one element of GET /v1/peers.
type PeerInfo struct {
	ID     string `json:"id"`
	Addr   string `json:"addr"`
	Leader bool   `json:"leader"`
	// InLedger says the ledger registered this auditor, so its signature
	// counts towards a checkpoint's quorum.
	InLedger bool `json:"in_ledger"`
	// VerifierKey is the note verifier key the ledger registered for it
	// (compliance and auditor readers only).
	VerifierKey string `json:"verifier_key,omitempty"`
}

// Entries is GET /v1/entries.
type Entries struct {
	Start   int64   `json:"start"`
	Limit   int     `json:"limit"`
	Size    int64   `json:"size"` // the log's size when read
	Next    *int64  `json:"next"` // start of the next page; null at the end
	Entries []Entry `json:"entries"`
}

// Cosigner says whether one of the ledger's auditors signed a checkpoint.
type Cosigner struct {
	ID     string `json:"id"`
	Signed bool   `json:"signed"`
}

// CheckpointInfo is GET /v1/checkpoint.
type CheckpointInfo struct {
	ledger.Checkpoint
	Note      string     `json:"note"` // the signed note, to keep for a later verify --earlier
	Cosigners []Cosigner `json:"cosigners"`
	Quorum    int        `json:"quorum"`     // signatures needed
	QuorumMet bool       `json:"quorum_met"` // a majority of the ledger's auditors signed
}

// InclusionProof is GET /v1/proof/inclusion.
type InclusionProof struct {
	Index    int64       `json:"index"`
	Size     int64       `json:"size"`
	LeafHash tlog.Hash   `json:"leaf_hash"`
	Root     tlog.Hash   `json:"root"`
	Proof    []tlog.Hash `json:"proof"`
}

// ConsistencyProof is GET /v1/proof/consistency.
type ConsistencyProof struct {
	Old     int64       `json:"old"`
	New     int64       `json:"new"`
	OldRoot tlog.Hash   `json:"old_root"`
	NewRoot tlog.Hash   `json:"new_root"`
	Proof   []tlog.Hash `json:"proof"`
}

// JoinRequest is the body of POST /v1/admin/join and /v1/admin/remove
// (which reads only ID).
type JoinRequest struct {
	ID   string `json:"id"`
	Addr string `json:"addr,omitempty"`
}

// Error is the body of every error response.
type Error struct {
	Error string `json:"error"`
}

// level is what an endpoint requires of the caller.
type level int

const (
	anyReader  level = iota // compliance, auditor, hospital
	fullReader              // compliance, auditor
	selfAdmin               // this auditor's own certificate
	anyAuditor              // any auditor's certificate (the request carries its own authority)
)

// Handler returns the API's routes; every one checks the caller's role.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	route := func(pattern string, l level, h func(w http.ResponseWriter, r *http.Request, p crypto.Peer) error) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			p, err := a.authorize(r, l)
			if err == nil {
				err = h(w, r, p)
			}
			if err != nil {
				status := http.StatusInternalServerError
				var se *statusError
				if errors.As(err, &se) {
					status = se.status
				}
				writeError(w, status, err.Error())
			}
		})
	}
	route("GET /v1/status", anyReader, a.status)
	route("GET /v1/peers", anyReader, a.peers)
	route("GET /v1/accounts", anyReader, a.accounts)
	route("GET /v1/checkpoint", anyReader, a.checkpoint)
	route("GET /v1/proof/inclusion", anyReader, a.inclusion)
	route("GET /v1/proof/consistency", anyReader, a.consistency)
	route("GET /v1/charges", anyReader, a.charges)
	route("GET /v1/entries", fullReader, a.entries)
	route("GET /v1/export", fullReader, a.export)
	route("POST /v1/admin/join", selfAdmin, a.join)
	route("POST /v1/admin/remove", selfAdmin, a.remove)
	route("POST /v1/admin/snapshot", selfAdmin, a.snapshot)
	route("POST /v1/admin/remove-signed", anyAuditor, a.removeSigned)
	route("POST /v1/admin/submit", anyAuditor, a.submit)
	return mux
}

// statusError is a refusal a handler returns with the HTTP status to
// answer it with; any other error a handler returns is answered with 500.
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

func refuse(status int, msg string) error { return &statusError{status: status, msg: msg} }

// authorize returns the caller named by its verified client certificate,
// or a *statusError saying why it is refused.
func (a *API) authorize(r *http.Request, l level) (crypto.Peer, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || len(r.TLS.VerifiedChains) == 0 {
		return crypto.Peer{}, refuse(http.StatusUnauthorized, "present a client certificate issued by the federation CA (nzc init makes one for each party)")
	}
	p, err := crypto.PeerFromCert(r.TLS.PeerCertificates[0])
	if err != nil {
		return crypto.Peer{}, refuse(http.StatusForbidden, err.Error())
	}
	full := p.Role == crypto.RoleCompliance || p.Role == crypto.RoleAuditor
	reader := full || p.Role == crypto.RoleHospital || p.Role == crypto.RoleStudent
	switch {
	case l == anyAuditor:
		if p.Role == crypto.RoleAuditor {
			return p, nil
		}
		return p, refuse(http.StatusForbidden, fmt.Sprintf("%s may not submit %s: an auditor's operator submits it, with the signatures it carries", p, r.URL.Path))
	case l != selfAdmin && !reader:
		return p, refuse(http.StatusForbidden, fmt.Sprintf("%s may not read the ledger: only the compliance, hospital, student and auditor roles may", p))
	case l == anyReader:
		return p, nil
	case l == fullReader:
		if full {
			return p, nil
		}
		return p, refuse(http.StatusForbidden, fmt.Sprintf("%s may not read %s: it carries every party's keys and every batch, so only the compliance and auditor roles may (hospitals and students read the accounts, checkpoints and proofs)", p, r.URL.Path))
	default:
		self := crypto.Peer{Role: crypto.RoleAuditor, ID: a.Self}
		if p == self {
			return p, nil
		}
		return p, refuse(http.StatusForbidden, fmt.Sprintf("%s may not administer auditor %s: only its own operator may, with the certificate of %s", p, a.Self, self))
	}
}

// writeJSON answers v as indented JSON; an error is one v cannot be
// encoded with, nothing written yet.
func writeJSON(w http.ResponseWriter, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
	return nil
}

// writeFile answers b as a download.
func writeFile(w http.ResponseWriter, b []byte) error {
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(b)
	return nil
}

func writeError(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(Error{Error: msg})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func (a *API) status(w http.ResponseWriter, _ *http.Request, _ crypto.Peer) error {
	s := Status{Auditor: a.Cluster.Status(), Ready: true, Origin: a.Ledger.Origin()}
	if err := a.Cluster.Ready(); err != nil {
		s.Ready, s.NotYet = false, err.Error()
	}
	s.Size = a.Ledger.TreeSize()
	root, err := a.Ledger.TreeHash(s.Size)
	if err != nil {
		return err
	}
	s.Root = root
	return writeJSON(w, s)
}

func (a *API) peers(w http.ResponseWriter, _ *http.Request, p crypto.Peer) error {
	st := a.Cluster.Status()
	keys := map[string]string{}
	for _, au := range a.Ledger.Auditors(a.Ledger.TreeSize()) {
		k, err := ledger.VerifierKey(au.ID, au.PublicKey)
		if err != nil {
			return err
		}
		keys[au.ID] = k
	}
	out := []PeerInfo{}
	for _, m := range st.Peers {
		k, ok := keys[m.ID]
		pi := PeerInfo{ID: m.ID, Addr: m.Addr, Leader: m.ID == st.LeaderID, InLedger: ok}
		if p.Role == crypto.RoleCompliance || p.Role == crypto.RoleAuditor {
			pi.VerifierKey = k
		}
		out = append(out, pi)
	}
	return writeJSON(w, out)
}

func (a *API) accounts(w http.ResponseWriter, _ *http.Request, _ crypto.Peer) error {
	return writeJSON(w, a.Ledger.Accounts())
}

// intParam parses the query parameter name as an integer in [lo, hi]; a
// missing parameter is def, or an error when def < lo. Its error is a bad
// request, followed by hint in parentheses when hint is not empty.
func intParam(r *http.Request, name string, def, lo, hi int64, hint string) (int64, error) {
	bad := func(msg string) error {
		if hint != "" {
			msg += " (" + hint + ")"
		}
		return refuse(http.StatusBadRequest, msg)
	}
	s := r.URL.Query().Get(name)
	if s == "" {
		if def < lo {
			return 0, bad(fmt.Sprintf("parameter %s is required", name))
		}
		return def, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, bad(fmt.Sprintf("parameter %s=%q is not a whole number", name, s))
	}
	if v < lo || v > hi {
		return 0, bad(fmt.Sprintf("parameter %s=%d is out of range: it must be between %d and %d", name, v, lo, hi))
	}
	return v, nil
}

// page parses the start and limit of one page of a log of size entries
// (log names it in an error); limit is at most MaxLimit.
func page(r *http.Request, size int64, log string) (start, limit int64, err error) {
	start, err = intParam(r, "start", 0, 0, size, fmt.Sprintf("the %s has %d entries", log, size))
	if err != nil {
		return 0, 0, err
	}
	limit, err = intParam(r, "limit", DefaultLimit, 1, 1<<31-1, "")
	return start, min(limit, MaxLimit), err
}

func (a *API) entries(w http.ResponseWriter, r *http.Request, _ crypto.Peer) error {
	size := a.Ledger.TreeSize()
	start, limit, err := page(r, size, "log")
	if err != nil {
		return err
	}
	end := min(start+limit, size)
	raw, err := a.Ledger.Entries(start, end)
	if err != nil {
		return err
	}
	out := Entries{Start: start, Limit: int(limit), Size: size, Entries: make([]Entry, 0, len(raw))}
	for _, b := range raw {
		e, err := DecodeEntry(b)
		if err != nil {
			return err
		}
		out.Entries = append(out.Entries, e)
	}
	if end < size {
		out.Next = &end
	}
	return writeJSON(w, out)
}

func (a *API) checkpoint(w http.ResponseWriter, r *http.Request, _ crypto.Peer) error {
	ctx, cancel := context.WithTimeout(r.Context(), cosignTimeout)
	defer cancel()
	signed, err := a.Cluster.CosignCheckpoint(ctx)
	var qe *ledger.QuorumError
	if err != nil && !(errors.As(err, &qe) && signed != nil) {
		return refuse(http.StatusServiceUnavailable, "no checkpoint: "+err.Error())
	}
	c, err := ledger.PeekCheckpoint(signed)
	if err != nil {
		return err
	}
	keys, err := a.Ledger.AuditorKeys(c.Size)
	if err != nil {
		return err
	}
	sc, err := ledger.OpenCheckpoint(signed, keys)
	if err != nil && !errors.As(err, &qe) {
		return err
	}
	info := CheckpointInfo{Checkpoint: c, Note: string(signed), Quorum: ledger.Quorum(len(keys)), QuorumMet: err == nil}
	signers := map[string]bool{}
	for _, s := range sc.Signers {
		signers[s] = true
	}
	for _, au := range a.Ledger.Auditors(c.Size) {
		info.Cosigners = append(info.Cosigners, Cosigner{ID: au.ID, Signed: signers[au.ID]})
	}
	return writeJSON(w, info)
}

// treeSizeParam reads the size of a tree the log has held: from 1 to the
// log's size now, which it is when the parameter is absent.
func (a *API) treeSizeParam(r *http.Request, name string) (int64, error) {
	tree := a.Ledger.TreeSize()
	return intParam(r, name, tree, 1, tree, fmt.Sprintf("the log has %d entries", tree))
}

func (a *API) inclusion(w http.ResponseWriter, r *http.Request, _ crypto.Peer) error {
	size, err := a.treeSizeParam(r, "size")
	if err != nil {
		return err
	}
	index, err := intParam(r, "index", -1, 0, size-1, fmt.Sprintf("entries of a tree of size %d are 0 to %d", size, size-1))
	if err != nil {
		return err
	}
	proof, err1 := a.Ledger.ProveInclusion(index, size)
	raw, err2 := a.Ledger.Entries(index, index+1)
	root, err3 := a.Ledger.TreeHash(size)
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	return writeJSON(w, InclusionProof{Index: index, Size: size, LeafHash: tlog.RecordHash(raw[0]), Root: root, Proof: nonNil(proof)})
}

func (a *API) consistency(w http.ResponseWriter, r *http.Request, _ crypto.Peer) error {
	newSize, err := a.treeSizeParam(r, "new")
	if err != nil {
		return err
	}
	oldSize, err := intParam(r, "old", -1, 1, newSize, fmt.Sprintf("old must be a size from 1 to new=%d", newSize))
	if err != nil {
		return err
	}
	proof, err1 := a.Ledger.ProveConsistency(oldSize, newSize)
	oldRoot, err2 := a.Ledger.TreeHash(oldSize)
	newRoot, err3 := a.Ledger.TreeHash(newSize)
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	return writeJSON(w, ConsistencyProof{Old: oldSize, New: newSize, OldRoot: oldRoot, NewRoot: newRoot, Proof: nonNil(proof)})
}

func nonNil(h []tlog.Hash) []tlog.Hash {
	if h == nil {
		return []tlog.Hash{}
	}
	return h
}

func (a *API) export(w http.ResponseWriter, r *http.Request, _ crypto.Peer) error {
	ctx, cancel := context.WithTimeout(r.Context(), 2*cosignTimeout)
	defer cancel()
	cp, size, err := exportCheckpoint(ctx, a.Cluster)
	if err != nil {
		return refuse(http.StatusServiceUnavailable, "no export: "+err.Error())
	}
	// Written as it is read from the history. An error before the first
	// byte (a checkpoint larger than this auditor's log) is a refusal; a
	// later one (the client gone, the disk failing) can only cut the body
	// short, which decoding refuses: the export states its entry count
	// first.
	cw := &countingWriter{w: w}
	w.Header().Set("Content-Type", "application/octet-stream")
	if err := a.Ledger.WriteExport(cw, size, [][]byte{cp}); err != nil && cw.n == 0 {
		w.Header().Del("Content-Type")
		return refuse(http.StatusServiceUnavailable, "no export: "+err.Error())
	}
	return nil
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// exportCheckpoint is the checkpoint a majority cosigned, and its size.
func exportCheckpoint(ctx context.Context, c Cluster) ([]byte, int64, error) {
	cp, err := c.CosignCheckpoint(ctx)
	if err != nil {
		return nil, 0, err
	}
	p, err := ledger.PeekCheckpoint(cp)
	if err != nil {
		return nil, 0, err
	}
	return cp, p.Size, nil
}

// maxAdminBody bounds an administrative request's body.
const maxAdminBody = 4096

// readJoin reads the body of a join or removal request.
func readJoin(w http.ResponseWriter, r *http.Request, needAddr bool) (JoinRequest, error) {
	var req JoinRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAdminBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, refuse(http.StatusBadRequest, "the body must be JSON {\"id\": …, \"addr\": …}: "+err.Error())
	}
	if err := crypto.ValidateID(req.ID); err != nil {
		return req, refuse(http.StatusBadRequest, "id: "+err.Error())
	}
	if needAddr && req.Addr == "" {
		return req, refuse(http.StatusBadRequest, "addr is required: the raft address (HOST:PORT) the other auditors dial")
	}
	return req, nil
}

// adminError is a cluster's error of the administrative request what,
// with its HTTP status.
func adminError(what string, err error) error {
	var ce *raftnode.ConfigError
	status := http.StatusInternalServerError
	switch {
	case errors.As(err, &ce):
		status = http.StatusBadRequest
	case errors.Is(err, raftnode.ErrMembership):
		status = http.StatusForbidden
	case errors.Is(err, raftnode.ErrNoLeader), errors.Is(err, raftnode.ErrShutdown), errors.Is(err, raftnode.ErrTimeout),
		errors.Is(err, raftnode.ErrOutcomeUnknown), errors.Is(err, context.DeadlineExceeded):
		status = http.StatusServiceUnavailable
	}
	return refuse(status, what+": "+err.Error())
}

// adminTimeout bounds one membership change or snapshot.
const adminTimeout = 30 * time.Second

// membership reads a join or removal request of this auditor and runs
// change on its id and address. One auditor's certificate must not add
// voters or remove the others: a new auditor joins with its own
// certificate (started with join addresses), and an auditor leaves by
// asking for its own removal.
func (a *API) membership(w http.ResponseWriter, r *http.Request, what string, needAddr bool, change func(ctx context.Context, id, addr string) error) error {
	req, err := readJoin(w, r, needAddr)
	if err != nil {
		return err
	}
	if req.ID != a.Self {
		return refuse(http.StatusForbidden, fmt.Sprintf("%s: auditor %s may change only its own membership, not %s's: a new auditor joins with its own certificate (start it with join addresses), and an auditor leaves by asking for itself", what, a.Self, req.ID))
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	if err := change(ctx, req.ID, req.Addr); err != nil {
		return adminError(what, err)
	}
	return writeJSON(w, a.Cluster.Status())
}

func (a *API) join(w http.ResponseWriter, r *http.Request, _ crypto.Peer) error {
	return a.membership(w, r, "join", true, a.Cluster.Join)
}

func (a *API) remove(w http.ResponseWriter, r *http.Request, _ crypto.Peer) error {
	return a.membership(w, r, "remove", false, func(ctx context.Context, id, _ string) error { return a.Cluster.Remove(ctx, id) })
}

// removeSigned removes another auditor on the signatures of a majority of
// the other auditors (a Removal): the way to remove one that has vanished.
func (a *API) removeSigned(w http.ResponseWriter, r *http.Request, _ crypto.Peer) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxAdminBody))
	if err != nil {
		return refuse(http.StatusBadRequest, "the body must be a removal of at most "+strconv.Itoa(maxAdminBody)+" bytes: "+err.Error())
	}
	rm, err := DecodeRemoval(body)
	if err != nil {
		return refuse(http.StatusBadRequest, err.Error())
	}
	if err := crypto.ValidateID(rm.Remove); err != nil {
		return refuse(http.StatusBadRequest, "remove: "+err.Error())
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	if err := a.Cluster.RemoveSigned(ctx, rm.Remove, body); err != nil {
		if errors.Is(err, raftnode.ErrMembership) {
			return refuse(http.StatusForbidden, "remove: "+err.Error())
		}
		return adminError("remove", err)
	}
	return writeJSON(w, a.Cluster.Status())
}

func (a *API) snapshot(w http.ResponseWriter, r *http.Request, _ crypto.Peer) error {
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	f, err := a.Cluster.SaveSnapshot(ctx)
	if err != nil {
		return adminError("snapshot", err)
	}
	b, err := f.Encode()
	if err != nil {
		return err
	}
	w.Header().Set("Content-Disposition", "attachment; filename="+strconv.Quote(strings.ReplaceAll(f.Meta.ID, "/", "_")+".snapshot"))
	return writeFile(w, b)
}
