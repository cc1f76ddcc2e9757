package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/cmd/internal/clitest"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/crypto/cryptotest"
	"github.com/nzcfed/nzc/federation/proctest"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/compliance"
	"github.com/nzcfed/nzc/party/auditor/dashboard"
	"github.com/nzcfed/nzc/party/auditor/intake"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// readTimeout is the --timeout of each read below: shorter than the
// auditors' round of cosigning for a reader (5 s), so a read that waited
// for a dead auditor's signature until that round timed out fails.
const readTimeout = "4s"

// TestLedgerReadsWithAMajority runs three nzc-auditor processes, SIGKILLs
// one, grows the log with the other two, and reads as a compliance officer
// would: status, export and accounts each succeed on their first try,
// within a timeout shorter than the auditors' cosigning timeout, and name
// the auditor that is missing; the export verifies, and the dashboard
// shows the majority's checkpoint and who did not sign it. With a second auditor
// killed the same reads fail with ErrNoMajority, naming both.
func TestLedgerReadsWithAMajority(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three auditor processes")
	}
	t.Setenv("NZC_CHECKPOINTS", t.TempDir())
	dir, m, auditors := startAuditorProcesses(t, "nzc.test/majority")
	ctx := context.Background()

	// A follower goes down, so that the other two still commit.
	leader, dead := leaderAndFollower(t, ctx, auditors)
	dead.p.Kill()

	// The log grows while it is down: a hospital opens its account.
	agg := m.ByRole(crypto.RoleAggregator)[0]
	netCfg, err := quicnet.LoadConfig(m.Path(m.CACert), m.Path(agg.Cert), m.Path(agg.Key))
	if err != nil {
		t.Fatal(err)
	}
	var intakes []string
	for _, a := range auditors {
		if a != dead {
			intakes = append(intakes, a.intake)
		}
	}
	lc, err := intake.NewClient(netCfg, intakes)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	// Stamped now: an auditor refuses an account command stamped far from its clock.
	h := m.ByRole(crypto.RoleHospital)[0]
	open, err := ledger.Sign(&ledger.OpenAccount{Hospital: h.ID, CapEpsilon: 8, CapDelta: 1e-5, Timestamp: time.Now().UnixNano()}, h.ID, cryptotest.SigningKey(t, m, h))
	if err != nil {
		t.Fatal(err)
	}
	var res *nzcpb.LedgerResult
	if err := proctest.Poll(ctx, 30*time.Second, func() bool {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		res, err = lc.Submit(actx, open)
		return err == nil
	}); err != nil || res.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED {
		t.Fatalf("open %s's account with %s down: %v %v", h.ID, dead.id, err, res)
	}
	grown := int64(res.GetIndex()) + 1

	// Each read's time is logged (go test -v): with one auditor down it
	// answers once a majority cosigned, plus at most a second for the
	// others; the --timeout bounds it.
	read := func(args ...string) (stdout, stderr string, err error) {
		start := time.Now()
		stdout, stderr, err = clitest.ExecuteSplit(t, newRootCommand(), append(append([]string{"ledger"}, args...), "--federation", dir, "--timeout", readTimeout)...)
		t.Logf("nzc ledger %s: %v (err %v)", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), err)
		return stdout, stderr, err
	}

	// status: the largest view covers the grown log, and names the
	// missing auditor.
	out, errOut, err := read("status", "--format", "json")
	var st ledgerStatus
	if err != nil || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("status with %s down: %v\n%s%s", dead.id, err, out, errOut)
	}
	if !slices.Equal(st.Missing, []string{dead.id}) || st.Largest == nil || st.Largest.Size < grown || st.Answered != 2 || !st.Consistent {
		t.Fatalf("status with %s down: missing %v, largest %+v, %d answered, consistent %v; want %s missing and a view of %d entries", dead.id, st.Missing, st.Largest, st.Answered, st.Consistent, dead.id, grown)
	}
	if out, errOut, err := read("status"); err != nil || !strings.Contains(out, "missing: "+dead.id+" did not answer") {
		t.Fatalf("status as text with %s down: %v\n%s%s", dead.id, err, out, errOut)
	}

	// export: written from a live auditor, verifies, names the missing.
	file := filepath.Join(t.TempDir(), "ledger.export")
	if out, errOut, err := read("export", "--out", file); err != nil || !strings.Contains(out, "missing: "+dead.id+" did not answer") {
		t.Fatalf("export with %s down: %v\n%s%s", dead.id, err, out, errOut)
	}
	if text, err := runNZC(t, "ledger", "verify", "--export", file, "--federation", dir); err != nil || !strings.Contains(text, "VERIFIED") {
		t.Fatalf("verify the export made with %s down: %v\n%s", dead.id, err, text)
	}

	// accounts: from a live auditor, the missing one named on stderr.
	out, errOut, err = read("accounts", "--format", "json")
	var accounts []ledger.Account
	if err != nil || json.Unmarshal([]byte(out), &accounts) != nil || len(accounts) != 1 || accounts[0].Hospital != h.ID || !strings.Contains(errOut, "missing: "+dead.id+" did not answer") {
		t.Fatalf("accounts with %s down: %v %+v\n%s%s", dead.id, err, accounts, out, errOut)
	}

	// The leader's dashboard: its checkpoint is the majority's, and names
	// the auditor that did not sign.
	// (It reads the log again every 2 s.)
	hc := &http.Client{Timeout: 4 * time.Second}
	var cv dashboard.CheckpointView
	proctest.WaitFor(t, 20*time.Second, "the dashboard's checkpoint of the grown log", func() bool {
		resp, err := hc.Get("http://" + leader.dashboard + "/api/checkpoint")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		cv = dashboard.CheckpointView{}
		return json.NewDecoder(resp.Body).Decode(&cv) == nil && cv.Size >= grown
	})
	if !cv.OK || !slices.Equal(cv.Missing, []string{dead.id}) {
		t.Fatalf("the dashboard's checkpoint with %s down: %+v, want %s missing", dead.id, cv, dead.id)
	}
	// A killed auditor is still a raft member: the membership agrees with
	// the ledger's auditors.
	if len(cv.Members) != len(auditors) || len(cv.Membership) != 0 {
		t.Fatalf("the dashboard's membership with %s down: members %q, differences %q; want all %d, none", dead.id, cv.Members, cv.Membership, len(auditors))
	}

	// A second auditor down: no majority, and every read says so, naming
	// both.
	var second *auditorProcess
	for _, a := range auditors {
		if a != dead && a != leader {
			second = a
		}
	}
	second.p.Kill()
	for _, cmd := range [][]string{{"status"}, {"export", "--out", filepath.Join(t.TempDir(), "x")}, {"accounts"}} {
		out, errOut, err := read(cmd...)
		if !errors.Is(err, compliance.ErrNoMajority) || !strings.Contains(err.Error(), dead.id) || !strings.Contains(err.Error(), second.id) {
			t.Fatalf("%s with %s and %s down: %v, want %v naming both\n%s%s", cmd[0], dead.id, second.id, err, compliance.ErrNoMajority, out, errOut)
		}
	}
}

// leaderAndFollower waits for a leader among auditors and returns it with
// one of its followers.
func leaderAndFollower(t *testing.T, ctx context.Context, auditors []*auditorProcess) (leader, follower *auditorProcess) {
	t.Helper()
	proctest.WaitFor(t, 20*time.Second, "a leader", func() bool {
		s, err := auditors[0].status(ctx)
		if err != nil || s.Auditor.LeaderID == "" {
			return false
		}
		leader, follower = nil, nil
		for _, a := range auditors {
			if a.id == s.Auditor.LeaderID {
				leader = a
			} else {
				follower = a
			}
		}
		return leader != nil
	})
	return leader, follower
}
