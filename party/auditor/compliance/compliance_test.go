package compliance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/crypto/cryptotest"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
	"github.com/nzcfed/nzc/party/internal/fedtest"
)

// testKeys are the parties' keys.
const testKeys = fedtest.Keys("compliance test ")

// fixture is a ledger of genesis, two accounts, a student and n charges,
// and a fake cluster of three auditors over it.
type fixture struct {
	st      *ledger.State
	cluster *fakeCluster
}

func newFixture(t *testing.T, charges int) *fixture {
	t.Helper()
	st := ledger.New()
	apply := func(b ledger.Body, signer string) {
		t.Helper()
		cmd, err := ledger.Sign(b, signer, testKeys.Key(signer))
		if err != nil {
			t.Fatal(err)
		}
		if r, err := st.Apply(cmd); err != nil || r.Status != ledger.StatusAccepted {
			t.Fatalf("%s: %v %+v", b.Kind(), err, r)
		}
	}
	ts := int64(1_700_000_000_000_000_000)
	apply(testKeys.Genesis("nzc.test/api", ts, "h1", "h2"), "admin")
	apply(&ledger.OpenAccount{Hospital: "h1", CapEpsilon: 8, CapDelta: 1e-5, Timestamp: ts}, "h1")
	apply(&ledger.OpenAccount{Hospital: "h2", CapEpsilon: 8, CapDelta: 1e-5, Timestamp: ts}, "h2")
	apply(&ledger.RegisterStudent{Student: "s1", Timestamp: ts}, "admin")
	curve := mechanism.RDPDataIndependentGaussian(mechanism.DefaultGrid(), 400).Values()
	for i := range charges {
		batch := fmt.Sprintf("b%d", i)
		apply(&ledger.Charge{BatchID: batch, Student: "s1", Hospitals: []string{"h1", "h2"}, Mechanism: "gnmax",
			Params: mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Classes: 10, Sigma: 400}.LedgerParams(), Queries: 1, Answers: 1, Curve: curve,
			AnswersHash: sha256.Sum256([]byte(batch)), Timestamp: ts + int64(i)}, "agg")
	}
	return &fixture{st: st, cluster: &fakeCluster{st: st, signers: []string{"a1", "a2", "a3"}}}
}

// fakeCluster is a Cluster whose checkpoint is signed by the listed
// auditors' test keys.
type fakeCluster struct {
	st      *ledger.State
	signers []string
	joined  []JoinRequest
	removed []string
	err     error
}

func (c *fakeCluster) Status() raftnode.Status {
	return raftnode.Status{ID: "a1", Addr: "127.0.0.1:7501", State: "Leader", LeaderID: "a1", LeaderAddr: "127.0.0.1:7501",
		Peers: []raftnode.Peer{{ID: "a1", Addr: "127.0.0.1:7501"}, {ID: "a2", Addr: "127.0.0.1:7502"}, {ID: "a3", Addr: "127.0.0.1:7503"}}}
}
func (c *fakeCluster) Ready() error { return nil }
func (c *fakeCluster) CosignCheckpoint(context.Context) ([]byte, error) {
	return testKeys.Cosign(c.st, c.signers...)
}
func (c *fakeCluster) Join(_ context.Context, id, addr string) error {
	c.joined = append(c.joined, JoinRequest{ID: id, Addr: addr})
	return c.err
}
func (c *fakeCluster) Remove(_ context.Context, id string) error {
	c.removed = append(c.removed, id)
	return c.err
}
func (c *fakeCluster) RemoveSigned(_ context.Context, id string, proof []byte) error {
	if err := VerifyRemoval(c.st.Auditors(c.st.TreeSize()), id, proof, time.Now()); err != nil {
		return fmt.Errorf("%w: %w", raftnode.ErrMembership, err)
	}
	c.removed = append(c.removed, id)
	return c.err
}
func (c *fakeCluster) SaveSnapshot(context.Context) (raftnode.SnapshotFile, error) {
	b, err := c.st.Snapshot()
	return raftnode.SnapshotFile{State: b, Meta: raftnode.SnapshotMeta{ID: "2-9-1", Node: "a1", Index: 9, Term: 2, Peers: c.Status().Peers}}, err
}

// as returns a request from the party role/id, as the TLS layer hands it
// to the handler after verifying the client certificate.
func as(method, target, role, id string, body string) *http.Request {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	if role == "" {
		return r // no TLS, no certificate
	}
	cert := &x509.Certificate{URIs: []*url.URL{{Scheme: "nzc", Host: role, Path: "/" + id}}}
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}, VerifiedChains: [][]*x509.Certificate{{cert}}}
	return r
}

func serve(h http.Handler, r *http.Request) (int, []byte) {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.Bytes()
}

func TestRoles(t *testing.T) {
	f := newFixture(t, 2)
	h := (&API{Cluster: f.cluster, Ledger: f.st, Self: "a1"}).Handler()
	reads := []string{"/v1/status", "/v1/peers", "/v1/accounts", "/v1/checkpoint", "/v1/proof/inclusion?index=1", "/v1/proof/consistency?old=2"}
	full := []string{"/v1/entries", "/v1/export"}
	type tc struct {
		name, method, path, role, id, body string
		code                               int
		want                               string
	}
	var cases []tc
	for _, p := range append(reads, full...) {
		cases = append(cases,
			tc{"compliance " + p, "GET", p, "compliance", "compliance", "", 200, ""},
			tc{"auditor " + p, "GET", p, "auditor", "a2", "", 200, ""},
			tc{"aggregator " + p, "GET", p, "aggregator", "agg", "", 403, "only the compliance, hospital, student and auditor roles may"},
			tc{"no certificate " + p, "GET", p, "", "", "", 401, "present a client certificate"},
		)
	}
	for _, p := range reads {
		cases = append(cases, tc{"hospital " + p, "GET", p, "hospital", "h1", "", 200, ""},
			tc{"student " + p, "GET", p, "student", "s1", "", 200, ""})
	}
	for _, p := range full {
		cases = append(cases, tc{"hospital " + p, "GET", p, "hospital", "h1", "", 403, "only the compliance and auditor roles may"},
			tc{"student " + p, "GET", p, "student", "s1", "", 403, "only the compliance and auditor roles may"})
	}
	cases = append(cases, tc{"student /v1/charges", "GET", "/v1/charges?hospital=h1", "student", "s1", "", 403, "may not read charges"})
	for _, p := range []string{"/v1/admin/join", "/v1/admin/remove", "/v1/admin/snapshot"} {
		cases = append(cases,
			tc{"other auditor " + p, "POST", p, "auditor", "a2", `{"id":"a4","addr":"127.0.0.1:7504"}`, 403, "only its own operator may, with the certificate of nzc://auditor/a1"},
			tc{"compliance " + p, "POST", p, "compliance", "compliance", `{"id":"a4","addr":"127.0.0.1:7504"}`, 403, "may not administer auditor a1"},
			tc{"self " + p, "POST", p, "auditor", "a1", `{"id":"a1","addr":"127.0.0.1:7501"}`, 200, ""},
		)
	}
	cases = append(cases, tc{"compliance reads with POST", "POST", "/v1/accounts", "compliance", "compliance", "", 405, ""})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := serve(h, as(c.method, c.path, c.role, c.id, c.body))
			if code != c.code || !strings.Contains(string(body), c.want) {
				t.Fatalf("%s %s as %s/%s: %d %s, want %d containing %q", c.method, c.path, c.role, c.id, code, body, c.code, c.want)
			}
			if code >= 400 && code != 405 {
				var e Error
				if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
					t.Fatalf("error body is not {\"error\": …}: %s", body)
				}
			}
		})
	}
}

func TestBadParameters(t *testing.T) {
	f := newFixture(t, 2) // 6 entries
	h := (&API{Cluster: f.cluster, Ledger: f.st, Self: "a1"}).Handler()
	for _, c := range []struct {
		path, want string
	}{
		{"/v1/entries?start=-1", "start=-1 is out of range"},
		{"/v1/entries?start=7", "start=7 is out of range: it must be between 0 and 6"},
		{"/v1/entries?start=x", `is not a whole number`},
		{"/v1/entries?limit=0", "limit=0 is out of range"},
		{"/v1/entries?limit=1.5", "not a whole number"},
		{"/v1/proof/inclusion", "parameter index is required"},
		{"/v1/proof/inclusion?index=6", "index=6 is out of range: it must be between 0 and 5"},
		{"/v1/proof/inclusion?index=2&size=2", "index=2 is out of range: it must be between 0 and 1"},
		{"/v1/proof/inclusion?index=0&size=7", "size=7 is out of range"},
		{"/v1/proof/inclusion?index=0&size=0", "size=0 is out of range"},
		{"/v1/proof/consistency", "parameter old is required"},
		{"/v1/proof/consistency?old=0", "old=0 is out of range"},
		{"/v1/proof/consistency?old=5&new=4", "old=5 is out of range: it must be between 1 and 4"},
		{"/v1/proof/consistency?old=1&new=9", "new=9 is out of range"},
	} {
		code, body := serve(h, as("GET", c.path, "compliance", "compliance", ""))
		if code != http.StatusBadRequest || !strings.Contains(string(body), c.want) {
			t.Errorf("%s: %d %s, want 400 containing %q", c.path, code, body, c.want)
		}
	}
	for _, c := range []struct {
		path, body, want string
	}{
		{"/v1/admin/join", `{"id":"a4"}`, "addr is required"},
		{"/v1/admin/join", `{"id":"A 4","addr":"x:1"}`, "id: party id"},
		{"/v1/admin/join", `{"id":"a4","addr":"x:1","extra":1}`, "unknown field"},
		{"/v1/admin/remove", `not json`, "the body must be JSON"},
	} {
		code, body := serve(h, as("POST", c.path, "auditor", "a1", c.body))
		if code != http.StatusBadRequest || !strings.Contains(string(body), c.want) {
			t.Errorf("%s %s: %d %s, want 400 containing %q", c.path, c.body, code, body, c.want)
		}
	}
	if len(f.cluster.joined)+len(f.cluster.removed) != 0 {
		t.Fatalf("a bad request changed the cluster: %v %v", f.cluster.joined, f.cluster.removed)
	}
}

func getJSON(t *testing.T, h http.Handler, path, role string, v any) {
	t.Helper()
	code, body := serve(h, as("GET", path, role, role, ""))
	if code != http.StatusOK {
		t.Fatalf("%s: %d %s", path, code, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, body)
	}
}

func TestEntriesPaging(t *testing.T) {
	// 1200 entries: genesis, two accounts, a student, a charge, and
	// commands that do not decode (recorded as refused, and cheap to apply).
	f := newFixture(t, 1)
	for i := range 1200 - 5 {
		if r, err := f.st.Apply([]byte(fmt.Sprintf("not a command %d", i))); err != nil || r.Code != ledger.CodeMalformed {
			t.Fatalf("%v %+v", err, r)
		}
	}
	h := (&API{Cluster: f.cluster, Ledger: f.st, Self: "a1"}).Handler()
	var all []Entry
	start, pages := int64(0), 0
	for {
		var p Entries
		getJSON(t, h, fmt.Sprintf("/v1/entries?start=%d&limit=5000", start), "compliance", &p)
		pages++
		if p.Limit != MaxLimit || p.Size != 1200 || p.Start != start {
			t.Fatalf("page %+v", p)
		}
		all = append(all, p.Entries...)
		if p.Next == nil {
			break
		}
		start = *p.Next
	}
	if pages != 2 || len(all) != 1200 {
		t.Fatalf("%d pages, %d entries; want 2 pages (limit capped at %d) of 1200", pages, len(all), MaxLimit)
	}
	raw, _ := f.st.Entries(0, 1200)
	for i, e := range all {
		if e.Index != uint64(i) || !bytes.Equal(e.Raw, raw[i]) || e.LeafHash != tlog.RecordHash(raw[i]) {
			t.Fatalf("entry %d: %+v", i, e)
		}
		if decoded := e.Command != nil && e.Status == "accepted"; decoded != (i < 5) {
			t.Fatalf("entry %d: command %+v, status %s", i, e.Command, e.Status)
		}
		// A refused command is served as its fixed-size record.
		if i >= 5 && (e.Record == nil || e.Record.Kind != 0 || e.Command != nil || e.Code != "malformed") {
			t.Fatalf("entry %d: a command that does not decode is served as %+v", i, e)
		}
	}
	if all[0].Command.Kind != "genesis" || all[0].Command.Signer != "admin" || all[4].Command.Kind != "charge" ||
		all[4].Command.Body["batch"] != "b0" || len(all[4].Command.Body["curve"].([]any)) != mechanism.DefaultGrid().Len() {
		t.Fatalf("decoded commands: %+v / %+v", all[0].Command, all[4].Command)
	}
	// The default page, and the empty page at the end.
	var p Entries
	getJSON(t, h, "/v1/entries", "auditor", &p)
	if len(p.Entries) != DefaultLimit || p.Next == nil || *p.Next != DefaultLimit {
		t.Fatalf("default page: %d entries, next %v", len(p.Entries), p.Next)
	}
	getJSON(t, h, "/v1/entries?start=1200", "auditor", &p)
	if len(p.Entries) != 0 || p.Next != nil {
		t.Fatalf("page at the end: %+v", p)
	}
}

func TestReadsVerify(t *testing.T) {
	f := newFixture(t, 3) // 7 entries
	h := (&API{Cluster: f.cluster, Ledger: f.st, Self: "a1"}).Handler()

	var cp CheckpointInfo
	getJSON(t, h, "/v1/checkpoint", "hospital", &cp)
	keys, _ := f.st.AuditorKeys(7)
	if _, err := ledger.OpenCheckpoint([]byte(cp.Note), keys); err != nil || cp.Size != 7 || !cp.QuorumMet || cp.Quorum != 2 || len(cp.Cosigners) != 3 {
		t.Fatalf("checkpoint %+v (%v)", cp, err)
	}

	raw, _ := f.st.Entries(0, 7)
	for size := int64(1); size <= 7; size++ {
		root, _ := f.st.TreeHash(size)
		for i := range size {
			var p InclusionProof
			getJSON(t, h, fmt.Sprintf("/v1/proof/inclusion?index=%d&size=%d", i, size), "hospital", &p)
			if p.Root != root {
				t.Fatalf("inclusion %d in %d: root %v, want %v", i, size, p.Root, root)
			}
			if err := ledger.VerifyInclusion(raw[i], i, ledger.Checkpoint{Origin: "nzc.test/api", Size: size, Root: root}, p.Proof); err != nil {
				t.Fatalf("inclusion of %d in %d does not verify: %v", i, size, err)
			}
		}
		var c ConsistencyProof
		getJSON(t, h, fmt.Sprintf("/v1/proof/consistency?old=%d", size), "compliance", &c)
		if err := ledger.VerifyConsistency(ledger.Checkpoint{Origin: "o", Size: size, Root: c.OldRoot}, ledger.Checkpoint{Origin: "o", Size: 7, Root: c.NewRoot}, c.Proof); err != nil || c.OldRoot != root {
			t.Fatalf("consistency %d→7: %v", size, err)
		}
	}

	// A quorum short: the note is served, marked as not counting.
	f.cluster.signers = []string{"a2"}
	getJSON(t, h, "/v1/checkpoint", "compliance", &cp)
	if cp.QuorumMet || !cp.Cosigners[1].Signed || cp.Cosigners[0].Signed {
		t.Fatalf("checkpoint signed by one of three: %+v", cp)
	}
	code, body := serve(h, as("GET", "/v1/export", "compliance", "compliance", ""))
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "majority") {
		t.Fatalf("export without a quorum: %d %s", code, body)
	}
	f.cluster.signers = []string{"a1", "a3"}
	code, body = serve(h, as("GET", "/v1/export", "compliance", "compliance", ""))
	if code != http.StatusOK {
		t.Fatalf("export: %d %s", code, body)
	}
	if r := ledger.Verify(body, ledger.VerifyOptions{TrustedKeys: keys, Unpinned: true}); !r.OK {
		var b strings.Builder
		_ = r.WriteText(&b)
		t.Fatalf("the export does not verify:\n%s", b.String())
	}

	// Peers: keys for compliance, none for hospitals.
	var peers []PeerInfo
	getJSON(t, h, "/v1/peers", "compliance", &peers)
	if len(peers) != 3 || !peers[0].Leader || !peers[2].InLedger || peers[1].VerifierKey != keys[1] {
		t.Fatalf("peers for compliance: %+v", peers)
	}
	code, body = serve(h, as("GET", "/v1/peers", "hospital", "h2", ""))
	if code != http.StatusOK || bytes.Contains(body, []byte("verifier_key")) || bytes.Contains(body, []byte(keys[0])) {
		t.Fatalf("peers for a hospital carry keys: %s", body)
	}
	var accounts []ledger.Account
	getJSON(t, h, "/v1/accounts", "hospital", &accounts)
	if len(accounts) != 2 || accounts[1].Hospital != "h2" || accounts[1].Charges != 3 || !(accounts[1].Epsilon > 0) {
		t.Fatalf("accounts %+v", accounts)
	}
	var st Status
	getJSON(t, h, "/v1/status", "hospital", &st)
	if st.Size != 7 || st.Origin != "nzc.test/api" || !st.Ready || st.Auditor.LeaderID != "a1" {
		t.Fatalf("status %+v", st)
	}
}

func TestAdmin(t *testing.T) {
	f := newFixture(t, 1)
	h := (&API{Cluster: f.cluster, Ledger: f.st, Self: "a1"}).Handler()
	// One auditor's certificate may not add or remove another auditor.
	for _, req := range []struct{ path, body string }{
		{"/v1/admin/join", `{"id":"a4","addr":"127.0.0.1:7504"}`},
		{"/v1/admin/remove", `{"id":"a3"}`},
	} {
		if code, body := serve(h, as("POST", req.path, "auditor", "a1", req.body)); code != http.StatusForbidden || !strings.Contains(string(body), "only its own membership") {
			t.Fatalf("%s %s: %d %s", req.path, req.body, code, body)
		}
	}
	if len(f.cluster.joined)+len(f.cluster.removed) != 0 {
		t.Fatalf("a refused change reached the cluster: %v %v", f.cluster.joined, f.cluster.removed)
	}
	code, body := serve(h, as("POST", "/v1/admin/join", "auditor", "a1", `{"id":"a1","addr":"127.0.0.1:7501"}`))
	if code != 200 || len(f.cluster.joined) != 1 || f.cluster.joined[0] != (JoinRequest{ID: "a1", Addr: "127.0.0.1:7501"}) {
		t.Fatalf("join itself: %d %s %v", code, body, f.cluster.joined)
	}
	f.cluster.err = raftnode.ErrNoLeader
	code, body = serve(h, as("POST", "/v1/admin/remove", "auditor", "a1", `{"id":"a1"}`))
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "remove: ") {
		t.Fatalf("remove without a leader: %d %s", code, body)
	}
	code, body = serve(h, as("POST", "/v1/admin/snapshot", "auditor", "a1", ""))
	if code != 200 {
		t.Fatalf("snapshot: %d %s", code, body)
	}
	sf, err := raftnode.DecodeSnapshotFile(body)
	if err != nil || sf.Meta.Index != 9 {
		t.Fatalf("snapshot file: %v %+v", err, sf.Meta)
	}
	if err := ledger.New().Restore(sf.State); err != nil {
		t.Fatalf("the snapshot's state does not restore: %v", err)
	}
}

// TestTLS serves the API as nzc-auditor does and checks the handshake: no
// client certificate, or one from another CA, is refused before any
// request; a federation certificate with a wrong role gets 403.
func TestTLS(t *testing.T) {
	m, srv := tlsServer(t, newFixture(t, 1))
	other := provision(t, "other")
	cred := func(m *crypto.Manifest, role crypto.Role) *crypto.Credential { return credential(t, m, role) }
	pool := x509.NewCertPool()
	pool.AddCert(cryptotest.CACert(t, m))

	get := func(c *crypto.Credential) (int, string, error) {
		conf := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}
		if c != nil {
			conf.Certificates = []tls.Certificate{c.TLSCertificate()}
		}
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: conf}}
		defer client.CloseIdleConnections()
		resp, err := client.Get(srv.URL + "/v1/accounts")
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	for _, c := range []struct {
		name string
		cred *crypto.Credential
		code int
		want string
	}{
		{"compliance", cred(m, crypto.RoleCompliance), 200, "h1"},
		{"hospital", cred(m, crypto.RoleHospital), 200, "h1"},
		{"student", cred(m, crypto.RoleStudent), 200, "h1"},
		{"aggregator", cred(m, crypto.RoleAggregator), 403, "only the compliance, hospital, student and auditor roles may"},
		{"no client certificate", nil, 0, ""},
		{"another federation's compliance", cred(other, crypto.RoleCompliance), 0, ""},
	} {
		code, body, err := get(c.cred)
		if c.code == 0 {
			if err == nil {
				t.Errorf("%s: the handshake succeeded (%d %s)", c.name, code, body)
			}
			continue
		}
		if err != nil || code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %q %v, want %d containing %q", c.name, code, body, err, c.code, c.want)
		}
	}
}
