package quicnet

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/crypto/cryptotest"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// TestListenerRefuses: a party whose certificate comes from another CA,
// has expired, or names a role the listener does not accept is refused;
// the dialler learns it was refused and the listener says why.
func TestListenerRefuses(t *testing.T) {
	f := newFederation(t)
	tests := []struct {
		name   string
		client string
		why    error
		text   string // in the dialler's error
	}{
		{"other CA", "foreign-hospital", crypto.ErrUntrustedCertificate, "bad certificate"},
		{"expired", "expired-hospital", crypto.ErrCertificateExpired, "bad certificate"},
		{"wrong role", "auditor-1", crypto.ErrWrongRole, `role "auditor"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			rej := newRejections()
			cfg := f.config(t, "aggregator")
			cfg.OnReject = rej.record
			l := listen(t, cfg, crypto.RoleHospital, crypto.RoleStudent)
			accepted := acceptAll(ctx, l)
			ccfg := f.config(t, tc.client)
			// A party refuses to use its own expired certificate; this one's
			// clock is behind, so the listener has to catch it.
			ccfg.Now = func() time.Time { return ccfg.Credential.Cert.NotAfter.Add(-time.Minute) }
			_, err := Dial(ctx, l.Addr().String(), ccfg, crypto.RoleAggregator)
			if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("dial err = %v, want ErrRejected mentioning %q", err, tc.text)
			}
			why := recv(t, rej.ch, "rejection report")
			if !errors.Is(why, tc.why) {
				t.Fatalf("listener's reason = %v, want %v", why, tc.why)
			}
			select {
			case c := <-accepted:
				t.Fatalf("refused party was accepted as %v", c.Peer())
			default:
			}
		})
	}
}

func TestOwnExpiredCertificate(t *testing.T) {
	f := newFederation(t)
	_, err := Dial(testContext(t), "127.0.0.1:1", f.config(t, "expired-hospital"), crypto.RoleAggregator)
	if err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("err = %v", err)
	}
	if _, err := Listen("127.0.0.1:0", f.config(t, "expired-aggregator")); err == nil {
		t.Fatal("listening with an expired certificate succeeded")
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	m := cryptotest.Federation(t, dir, cryptotest.Spec{Hospitals: 1, Auditors: 1, Students: 1, Rand: seeded(9)})
	agg, _ := m.Party(crypto.RoleAggregator, "aggregator")
	hosp, _ := m.Party(crypto.RoleHospital, "hospital-1")
	acfg, err := LoadConfig(m.Path(m.CACert), m.Path(agg.Cert), m.Path(agg.Key))
	if err != nil {
		t.Fatal(err)
	}
	hcfg, err := LoadConfig(m.Path(m.CACert), m.Path(hosp.Cert), m.Path(hosp.Key))
	if err != nil {
		t.Fatal(err)
	}
	l := listen(t, acfg, crypto.RoleHospital)
	hospital, _ := connectPair(t, l, hcfg, crypto.RoleAggregator)
	if hospital.Peer().ID != "aggregator" {
		t.Fatalf("peer %v", hospital.Peer())
	}
	if _, err := LoadConfig(m.Path(m.CACert), m.Path(agg.Cert), m.Path(hosp.Key)); err == nil {
		t.Fatal("mismatched key accepted")
	}
}

// TestDiallerRefuses: the dialler accepts only a server of the expected
// role with a valid certificate of the federation CA.
func TestDiallerRefuses(t *testing.T) {
	f := newFederation(t)
	tests := []struct {
		name   string
		server string
		want   error
	}{
		{"other CA", "foreign-aggregator", crypto.ErrUntrustedCertificate},
		{"expired", "expired-aggregator", crypto.ErrCertificateExpired},
		{"wrong role", "auditor-1", crypto.ErrWrongRole},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			scfg := f.config(t, tc.server)
			// The expired server's clock is behind, so it still serves.
			scfg.Now = func() time.Time { return scfg.Credential.Cert.NotAfter.Add(-time.Minute) }
			l := listen(t, scfg)
			acceptAll(ctx, l)
			_, err := Dial(ctx, l.Addr().String(), f.config(t, "hospital-1"), crypto.RoleAggregator)
			if !errors.Is(err, tc.want) {
				t.Fatalf("dial err = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestCapturedVotePayload: votes travel sealed to the aggregator; what an
// observer of the frame captures cannot be opened with any other party's
// age identity and does not show the counts.
func TestCapturedVotePayload(t *testing.T) {
	f := newFederation(t)
	ctx := testContext(t)
	ids := map[string]*crypto.Identity{}
	for _, name := range []string{"aggregator", "hospital-1", "hospital-2", "student-1", "auditor-1"} {
		id, err := crypto.GenerateIdentity()
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = id
	}
	l := listen(t, f.config(t, "aggregator"), crypto.RoleHospital)
	hospital, agg := connectPair(t, l, f.config(t, "hospital-1"), crypto.RoleAggregator)
	counts := []uint32{41, 1, 0, 2, 40, 0}
	serve(t, hospital, Mux{protocol.TypeQueryBatch: {Roles: []crypto.Role{crypto.RoleAggregator}, Handle: func(_ context.Context, req *Request) (protocol.MsgType, []byte, error) {
		var q nzcpb.QueryBatch
		if err := req.Decode(&q); err != nil {
			return 0, nil, err
		}
		plain, err := protocol.Marshal(&nzcpb.Histograms{NumQueries: 2, NumClasses: 3, NumTeachers: 42, Counts: counts})
		if err != nil {
			return 0, nil, err
		}
		sealed, err := crypto.Seal(plain, ids["aggregator"].Recipient())
		if err != nil {
			return 0, nil, err
		}
		return Reply(&nzcpb.VoteBatch{BatchId: q.GetBatchId(), HospitalId: "hospital-1", NumQueries: 2, NumClasses: 3, SealedHistograms: sealed})
	}}})
	q := &nzcpb.QueryBatch{BatchId: testBatch, NumQueries: 2, FeatureDim: 1, NumClasses: 3,
		SealedFeatures: []byte("f"), HospitalIds: []string{"hospital-1"}, DeadlineUnixMs: 1}
	body, err := protocol.Marshal(q)
	if err != nil {
		t.Fatal(err)
	}
	rt, captured, err := agg.Call(ctx, protocol.TypeQueryBatch, body)
	if err != nil || rt != protocol.TypeVoteBatch {
		t.Fatalf("call: %v %v", rt, err)
	}
	plain, _ := protocol.Marshal(&nzcpb.Histograms{NumQueries: 2, NumClasses: 3, NumTeachers: 42, Counts: counts})
	if bytes.Contains(captured, plain[len(plain)-8:]) {
		t.Fatal("the captured frame shows the vote counts")
	}
	var votes nzcpb.VoteBatch
	if err := protocol.DecodeInto(rt, captured, &votes); err != nil {
		t.Fatal(err)
	}
	for name, id := range ids {
		got, err := crypto.Open(votes.GetSealedHistograms(), id)
		if name == "aggregator" {
			var h nzcpb.Histograms
			if err != nil || protocol.DecodePlain(got, &h) != nil || !slices.Equal(h.GetCounts(), counts) {
				t.Fatalf("aggregator cannot read the votes: %v", err)
			}
			continue
		}
		if !errors.Is(err, crypto.ErrNotForMe) {
			t.Fatalf("%s opened the votes (err %v)", name, err)
		}
	}
}
