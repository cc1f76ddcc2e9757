package compliance

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

// maxResponse bounds what the client reads of one answer (an export of a
// long ledger is the largest).
const maxResponse = 1 << 30

// maxErrorBody bounds what the client reads of a refusal.
const maxErrorBody = 1 << 20

// ErrUnreachable wraps a request that got no HTTP answer at all.
var ErrUnreachable = errors.New("no answer from the compliance API")

// StatusError is an answer other than 200 OK: the HTTP status and the
// server's own message.
type StatusError struct {
	Method, URL string
	Code        int    // the HTTP status code
	Message     string // the server's {"error": …}, or the body as text
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.URL, e.Code, http.StatusText(e.Code), e.Message)
}

// Client calls one auditor's compliance API over HTTPS, checking the
// auditor's certificate against the federation CA and presenting a
// federation client certificate; every method decodes into the server's
// own view types.
type Client struct {
	base string // https://HOST:PORT
	hc   *http.Client
}

// NewClient returns a client of the API at addr (HOST:PORT) presenting
// cred, trusting only ca, and requiring the server to be an auditor.
func NewClient(addr string, ca *x509.Certificate, cred *crypto.Credential) *Client {
	return NewClientTo(addr, ca, cred, "")
}

// NewClientTo is NewClient requiring the server to be auditor id, unless
// id is empty: its certificate's role and id, not only the CA and the host
// name, must be the ones asked for.
func NewClientTo(addr string, ca *x509.Certificate, cred *crypto.Credential, id string) *Client {
	// The server must be an auditor: the CA alone would let any party of
	// the federation answer for the ledger.
	return &Client{base: "https://" + addr, hc: &http.Client{Transport: &http.Transport{TLSClientConfig: crypto.ClientTLSTo(ca, cred, crypto.RoleAuditor, id)}}}
}

// NewClientAs returns a client of the API at addr presenting the
// certificate of party as from the federation m; the server may be any
// auditor of the federation.
func NewClientAs(addr string, m *crypto.Manifest, as string) (*Client, error) {
	return NewClientAsTo(addr, m, as, "")
}

// NewClientAsTo is NewClientAs requiring the server to be auditor id
// (unless id is empty).
func NewClientAsTo(addr string, m *crypto.Manifest, as, id string) (*Client, error) {
	if as == "" {
		return nil, errors.New("--as ID is required: the party whose certificate to present")
	}
	ca, err := crypto.LoadCert(m.Path(m.CACert))
	if err != nil {
		return nil, fmt.Errorf("federation CA: %w", err)
	}
	for _, p := range m.Parties {
		if p.ID != as {
			continue
		}
		cred, err := crypto.LoadCredential(m.Path(p.Cert), m.Path(p.Key))
		if err != nil {
			return nil, fmt.Errorf("%s's certificate: %w", as, err)
		}
		return NewClientTo(addr, ca, cred, id), nil
	}
	return nil, fmt.Errorf("federation %s has no party %q: use a party ID from %s", m.Dir, as, crypto.ManifestFile)
}

// Close releases the client's idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Status is GET /v1/status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	return s, c.getJSON(ctx, "/v1/status", &s)
}

// Peers is GET /v1/peers.
func (c *Client) Peers(ctx context.Context) ([]PeerInfo, error) {
	var ps []PeerInfo
	return ps, c.getJSON(ctx, "/v1/peers", &ps)
}

// Accounts is GET /v1/accounts.
func (c *Client) Accounts(ctx context.Context) ([]ledger.Account, error) {
	var as []ledger.Account
	return as, c.getJSON(ctx, "/v1/accounts", &as)
}

// Entries is GET /v1/entries: at most limit (≤ MaxLimit) entries from start.
func (c *Client) Entries(ctx context.Context, start, limit int64) (Entries, error) {
	var e Entries
	return e, c.getJSON(ctx, "/v1/entries?start="+itoa(start)+"&limit="+itoa(limit), &e)
}

// Checkpoint is GET /v1/checkpoint: the latest checkpoint with the
// auditors' cosignatures.
func (c *Client) Checkpoint(ctx context.Context) (CheckpointInfo, error) {
	var cp CheckpointInfo
	return cp, c.getJSON(ctx, "/v1/checkpoint", &cp)
}

// InclusionProof is GET /v1/proof/inclusion of entry index in the tree of
// size entries (0: the current tree).
func (c *Client) InclusionProof(ctx context.Context, index, size int64) (InclusionProof, error) {
	var p InclusionProof
	return p, c.getJSON(ctx, "/v1/proof/inclusion?index="+itoa(index)+orCurrent("size", size), &p)
}

// ConsistencyProof is GET /v1/proof/consistency from the tree of old
// entries to that of newSize (0: the current tree).
func (c *Client) ConsistencyProof(ctx context.Context, old, newSize int64) (ConsistencyProof, error) {
	var p ConsistencyProof
	return p, c.getJSON(ctx, "/v1/proof/consistency?old="+itoa(old)+orCurrent("new", newSize), &p)
}

// Charges is GET /v1/charges: up to limit (≤ MaxLimit) accepted charges
// naming hospital from entry start on, each with its receipt. A hospital's
// certificate reads only its own (hospital may then be empty).
func (c *Client) Charges(ctx context.Context, hospital string, start, limit int64) (Charges, error) {
	var ch Charges
	q := "/v1/charges?start=" + itoa(start) + "&limit=" + itoa(limit)
	if hospital != "" {
		q += "&hospital=" + url.QueryEscape(hospital)
	}
	return ch, c.getJSON(ctx, q, &ch)
}

// ProvenCharges reads every charge naming hospital, page by page, and
// checks each receipt against the auditors' keys (and that it proves the
// charge the auditor describes): an auditor's list is not taken on its
// word.
func (c *Client) ProvenCharges(ctx context.Context, hospital string, keys []string) ([]Charge, error) {
	v, err := ledger.NewVerifier(keys)
	if err != nil {
		return nil, fmt.Errorf("the pinned auditor keys: %w", err)
	}
	var out []Charge
	for next := int64(0); ; {
		p, err := c.Charges(ctx, hospital, next, MaxLimit)
		if err != nil {
			return out, err
		}
		for _, ch := range p.Charges {
			got, en, _, err := v.HospitalReceipt(ch.Receipt, hospital)
			if err == nil && (int64(en.Index) != ch.Index || got.BatchID != ch.BatchID || got.Queries != ch.Queries || got.Answers != ch.Answers) {
				err = fmt.Errorf("the receipt proves entry %d, batch %s, not what the auditor lists", en.Index, got.BatchID)
			}
			if err != nil {
				return out, fmt.Errorf("the auditor's charge at entry %d is not proven against the auditors' keys: %w", ch.Index, err)
			}
			out = append(out, ch)
		}
		if p.Next == nil {
			return out, nil
		}
		next = *p.Next
	}
}

// Export is GET /v1/export: the ledger's export encoding, not yet verified,
// read whole into memory (up to 1 GiB). ExportStream reads a long log.
func (c *Client) Export(ctx context.Context) ([]byte, error) {
	return c.do(ctx, http.MethodGet, "/v1/export", nil)
}

// ExportStream is GET /v1/export as it arrives: the body of the ledger's
// export encoding, not yet verified, for the caller to read (with
// ledger.NewExportReader or ledger.VerifyReader) and close. An export of
// any length is read in the memory of its largest entry.
func (c *Client) ExportStream(ctx context.Context) (io.ReadCloser, error) {
	resp, err := c.send(ctx, http.MethodGet, "/v1/export", nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// Join is POST /v1/admin/join (the auditor's own certificate only); it
// returns the membership the auditor then knows.
func (c *Client) Join(ctx context.Context, id, addr string) (raftnode.Status, error) {
	return c.admin(ctx, "/v1/admin/join", JoinRequest{ID: id, Addr: addr})
}

// Remove is POST /v1/admin/remove (the auditor's own certificate only).
func (c *Client) Remove(ctx context.Context, id string) (raftnode.Status, error) {
	return c.admin(ctx, "/v1/admin/remove", JoinRequest{ID: id})
}

// Snapshot is POST /v1/admin/snapshot (the auditor's own certificate
// only): the encoded snapshot file, not yet checked.
func (c *Client) Snapshot(ctx context.Context) ([]byte, error) {
	return c.do(ctx, http.MethodPost, "/v1/admin/snapshot", nil)
}

// RemoveSigned is POST /v1/admin/remove-signed: the removal of another
// auditor on the signatures of a majority of the other auditors (any
// auditor's certificate may submit it).
func (c *Client) RemoveSigned(ctx context.Context, r Removal) (raftnode.Status, error) {
	return c.admin(ctx, "/v1/admin/remove-signed", r)
}

func (c *Client) admin(ctx context.Context, path string, req any) (raftnode.Status, error) {
	b, err := c.do(ctx, http.MethodPost, path, req)
	if err != nil {
		return raftnode.Status{}, err
	}
	var s raftnode.Status
	if err := json.Unmarshal(b, &s); err != nil {
		return raftnode.Status{}, fmt.Errorf("POST %s%s: the answer is not the auditor's status: %w", c.base, path, err)
	}
	return s, nil
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// orCurrent is the query parameter &name=size, or nothing for 0 (the
// server's current tree).
func orCurrent(name string, size int64) string {
	if size == 0 {
		return ""
	}
	return "&" + name + "=" + itoa(size)
}

func (c *Client) getJSON(ctx context.Context, path string, v any) error {
	b, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("GET %s%s: the auditor's answer is not the expected JSON: %w", c.base, path, err)
	}
	return nil
}

func (c *Client) do(ctx context.Context, method, path string, body any) ([]byte, error) {
	resp, err := c.send(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %w", method, c.base+path, ErrUnreachable, err)
	}
	return b, nil
}

// send sends a request and returns the response of status 200, whose body
// the caller reads and closes; any other status is a *StatusError.
func (c *Client) send(ctx context.Context, method, path string, body any) (*http.Response, error) {
	u := c.base + path
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w (give the API as HOST:PORT)", method, u, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %w (is an auditor's compliance API listening there?)", method, u, ErrUnreachable, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %w", method, u, ErrUnreachable, err)
	}
	msg := strings.TrimSpace(string(b))
	var e Error
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	return nil, &StatusError{Method: method, URL: u, Code: resp.StatusCode, Message: msg}
}
