package compliance

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/crypto/cryptotest"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

// tlsServer serves the API over the fixture as nzc-auditor does: HTTPS
// with the federation's auditor-1 certificate, a federation client
// certificate required.
func tlsServer(t *testing.T, f *fixture) (*crypto.Manifest, *httptest.Server) {
	t.Helper()
	return tlsServerAs(t, f, crypto.RoleAuditor)
}

// tlsServerAs is tlsServer with the certificate of the federation's first
// party of the given role.
func tlsServerAs(t *testing.T, f *fixture, role crypto.Role) (*crypto.Manifest, *httptest.Server) {
	t.Helper()
	m := provision(t, "fed")
	srv := httptest.NewUnstartedServer((&API{Cluster: f.cluster, Ledger: f.st, Self: m.ByRole(role)[0].ID}).Handler())
	srv.TLS = crypto.ServerTLS(cryptotest.CACert(t, m), credential(t, m, role))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return m, srv
}

// provision makes a federation of one party per role in the test's
// directory name.
func provision(t *testing.T, name string) *crypto.Manifest {
	t.Helper()
	return cryptotest.Federation(t, filepath.Join(t.TempDir(), name), cryptotest.Spec{Hospitals: 1, Auditors: 1, Students: 1})
}

// credential is the credential of the federation m's first party of role.
func credential(t *testing.T, m *crypto.Manifest, role crypto.Role) *crypto.Credential {
	t.Helper()
	return cryptotest.Credential(t, m, m.ByRole(role)[0])
}

func clientAs(t *testing.T, m *crypto.Manifest, srv *httptest.Server, as string) *Client {
	t.Helper()
	c, err := NewClientAs(strings.TrimPrefix(srv.URL, "https://"), m, as)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestClient calls every endpoint through the client over TLS and checks
// that the answers decode into the server's views and verify.
func TestClient(t *testing.T) {
	f := newFixture(t, 3) // 7 entries
	m, srv := tlsServer(t, f)
	ctx := context.Background()
	c := clientAs(t, m, srv, "compliance")

	st, err := c.Status(ctx)
	if err != nil || st.Size != 7 || st.Origin != "nzc.test/api" || st.Auditor.LeaderID != "a1" {
		t.Fatalf("status %+v %v", st, err)
	}
	peers, err := c.Peers(ctx)
	if err != nil || len(peers) != 3 || !peers[0].Leader {
		t.Fatalf("peers %+v %v", peers, err)
	}
	accounts, err := c.Accounts(ctx)
	if err != nil || len(accounts) != 2 || accounts[1].Charges != 3 {
		t.Fatalf("accounts %+v %v", accounts, err)
	}
	page, err := c.Entries(ctx, 2, 3)
	if err != nil || len(page.Entries) != 3 || page.Entries[0].Index != 2 || page.Next == nil || *page.Next != 5 {
		t.Fatalf("entries %+v %v", page, err)
	}
	cp, err := c.Checkpoint(ctx)
	keys, _ := f.st.AuditorKeys(7)
	if err != nil || !cp.QuorumMet || cp.Size != 7 {
		t.Fatalf("checkpoint %+v %v", cp, err)
	}
	raw, _ := f.st.Entries(0, 7)
	for _, size := range []int64{0, 4} {
		p, err := c.InclusionProof(ctx, 3, size)
		if err != nil {
			t.Fatal(err)
		}
		if err := ledger.VerifyInclusion(raw[3], 3, ledger.Checkpoint{Origin: "o", Size: p.Size, Root: p.Root}, p.Proof); err != nil || (size != 0 && p.Size != size) {
			t.Fatalf("inclusion of 3 in size %d (%d): %v", size, p.Size, err)
		}
		q, err := c.ConsistencyProof(ctx, 2, size)
		if err != nil {
			t.Fatal(err)
		}
		if err := ledger.VerifyConsistency(ledger.Checkpoint{Origin: "o", Size: 2, Root: q.OldRoot}, ledger.Checkpoint{Origin: "o", Size: q.New, Root: q.NewRoot}, q.Proof); err != nil {
			t.Fatalf("consistency 2→%d: %v", q.New, err)
		}
	}
	export, err := c.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := ledger.Verify(export, ledger.VerifyOptions{TrustedKeys: keys, Unpinned: true}); !r.OK {
		t.Fatalf("the export does not verify: %v", r.Failures())
	}
	// The same bytes as a stream, verified as they arrive.
	body, err := c.ExportStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	streamed, err := io.ReadAll(body)
	body.Close()
	if err != nil || !bytes.Equal(streamed, export) {
		t.Fatalf("the streamed export is not the export (%v)", err)
	}
	body, err = c.ExportStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := ledger.VerifyReader(ctx, body, ledger.VerifyOptions{TrustedKeys: keys, Unpinned: true, Workers: 2})
	body.Close()
	if !r.OK {
		t.Fatalf("the streamed export does not verify: %v", r.Failures())
	}

	self := clientAs(t, m, srv, "auditor-1")
	if s, err := self.Join(ctx, "auditor-1", "127.0.0.1:7501"); err != nil || s.ID != "a1" || f.cluster.joined[0] != (JoinRequest{ID: "auditor-1", Addr: "127.0.0.1:7501"}) {
		t.Fatalf("join: %+v %v %v", s, err, f.cluster.joined)
	}
	if _, err := self.Remove(ctx, "auditor-1"); err != nil || f.cluster.removed[0] != "auditor-1" {
		t.Fatalf("remove: %v %v", err, f.cluster.removed)
	}
	snap, err := self.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sf, err := raftnode.DecodeSnapshotFile(snap); err != nil || sf.Meta.Index != 9 {
		t.Fatalf("snapshot: %v %+v", err, sf.Meta)
	}
}

// TestClientErrors checks that a refusal carries the HTTP status and the
// server's message, and that no answer at all is ErrUnreachable.
func TestClientErrors(t *testing.T) {
	f := newFixture(t, 1)
	m, srv := tlsServer(t, f)
	ctx := context.Background()
	for _, c := range []struct {
		name, as string
		call     func(*Client) error
		code     int
		want     string
	}{
		{"hospital reads entries", "hospital-1", func(c *Client) error { _, err := c.Entries(ctx, 0, 10); return err },
			http.StatusForbidden, "only the compliance and auditor roles may"},
		{"student reads entries", "student-1", func(c *Client) error { _, err := c.Entries(ctx, 0, 10); return err },
			http.StatusForbidden, "only the compliance and auditor roles may"},
		{"start past the log", "compliance", func(c *Client) error { _, err := c.Entries(ctx, 99, 10); return err },
			http.StatusBadRequest, "start=99 is out of range"},
		{"compliance administers", "compliance", func(c *Client) error { _, err := c.Remove(ctx, "a3"); return err },
			http.StatusForbidden, "may not administer auditor auditor-1"},
		{"hospital streams the export", "hospital-1", func(c *Client) error { _, err := c.ExportStream(ctx); return err },
			http.StatusForbidden, "only the compliance and auditor roles may"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.call(clientAs(t, m, srv, c.as))
			var se *StatusError
			if !errors.As(err, &se) || se.Code != c.code || !strings.Contains(se.Message, c.want) || strings.Contains(se.Message, `"error"`) {
				t.Fatalf("got %v, want a StatusError %d with %q", err, c.code, c.want)
			}
		})
	}
	if len(f.cluster.removed) != 0 {
		t.Fatalf("a refused request changed the cluster: %v", f.cluster.removed)
	}
	if _, err := NewClientAs("127.0.0.1:1", m, "nobody"); err == nil || !strings.Contains(err.Error(), `no party "nobody"`) {
		t.Fatalf("unknown party: %v", err)
	}
	c := clientAs(t, m, srv, "compliance")
	srv.Close()
	if _, err := c.Status(ctx); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("closed server: %v, want ErrUnreachable", err)
	}
}

// A server of the federation that is not an auditor — here one holding a
// student's certificate — is refused before anything is read from it: the
// CA and host-name checks alone would accept it.
func TestClientRefusesANonAuditorServer(t *testing.T) {
	f := newFixture(t, 1)
	m, srv := tlsServerAs(t, f, crypto.RoleStudent)
	c := clientAs(t, m, srv, "compliance")
	_, err := c.Status(context.Background())
	if err == nil || !strings.Contains(err.Error(), "not the auditor asked for") {
		t.Fatalf("a student's server was accepted as an auditor: %v", err)
	}
}
