package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/federation/proctest"
	"github.com/nzcfed/nzc/ledger"
)

// applier proposes a command by applying it to the ledger state, as the
// raft leader's state machine does.
type applier struct{ st *ledger.State }

func (a applier) Submit(_ context.Context, cmd []byte) ([]byte, uint64, error) {
	r, err := a.st.Apply(cmd)
	if err != nil {
		return nil, 0, err
	}
	return ledger.EncodeResult(r), r.Index, nil
}

// TestSuspendAndSubmit signs a hospital's suspension with the
// administrator key, submits it through an auditor, and reads the account
// as suspended; a replay and a forged version change nothing, and a
// reinstatement lifts it.
func TestSuspendAndSubmit(t *testing.T) {
	f := newLedgerFixture(t)
	st := f.log(t, 0)
	addr, _, _ := f.complianceAPI(t, st, 2)
	dir := t.TempDir()
	cmdFile := filepath.Join(dir, "suspend.cmd")
	if text, err := runNZC(t, "init", "suspend", "--dir", f.dir, "--hospital", "hospital-9", "--reason", "x", "--out", cmdFile); err == nil {
		t.Fatalf("suspending an unknown hospital: %s", text)
	}
	text, err := runNZC(t, "init", "suspend", "--dir", f.dir, "--hospital", "hospital-2", "--reason", "burnt 12 sessions without an answer", "--out", cmdFile)
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	submit := func(file string) (string, error) {
		return runNZC(t, "ledger", "submit", "--api", addr, "--federation", f.dir, "--as", f.auditors[0].ID, "--file", file)
	}
	if text, err := submit(cmdFile); err != nil || !strings.Contains(text, "suspended hospital hospital-2") {
		t.Fatalf("submit: %v\n%s", err, text)
	}
	text, err = runNZC(t, "ledger", "accounts", "--api", addr, "--federation", f.dir)
	if err != nil || !strings.Contains(text, "hospital hospital-2") || !strings.Contains(text, "SUSPENDED") || !strings.Contains(text, "burnt 12 sessions") {
		t.Fatalf("accounts after the suspension: %v\n%s", err, text)
	}
	size := st.TreeSize()
	if text, err := submit(cmdFile); err == nil || !strings.Contains(err.Error()+text, "stale-suspension") || st.TreeSize() != size {
		t.Fatalf("replayed suspension: %v\n%s", err, text)
	}
	reinstate := filepath.Join(dir, "reinstate.cmd")
	if text, err := runNZC(t, "init", "suspend", "--dir", f.dir, "--hospital", "hospital-2", "--reinstate", "--version", "2", "--reason", "ensemble retrained", "--out", reinstate); err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if text, err := submit(reinstate); err != nil || !strings.Contains(text, "reinstated hospital hospital-2") {
		t.Fatalf("reinstatement: %v\n%s", err, text)
	}
	if a, _ := st.Account("hospital-2"); a.Suspended {
		t.Fatal("reinstated hospital still suspended")
	}
}

// TestSuspendThroughAFollower submits a signed suspension to a follower of
// three nzc-auditor processes, which forwards it to the leader: every
// replica then holds it, and a replay changes nothing.
func TestSuspendThroughAFollower(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three auditor processes")
	}
	t.Setenv("NZC_CHECKPOINTS", t.TempDir())
	dir, _, auditors := startAuditorProcesses(t, "nzc.test/suspend")
	ctx := context.Background()
	_, follower := leaderAndFollower(t, ctx, auditors)
	cmdFile := filepath.Join(t.TempDir(), "suspend.cmd")
	if text, err := runNZC(t, "init", "suspend", "--dir", dir, "--hospital", "hospital-2", "--reason", "burnt sessions", "--out", cmdFile); err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	submit := func() (string, error) {
		return runNZC(t, "ledger", "submit", "--api", follower.id+"="+follower.api, "--federation", dir, "--as", follower.id, "--file", cmdFile, "--format", "json")
	}
	text, err := submit()
	var res ledger.Result
	if err != nil || json.Unmarshal([]byte(text), &res) != nil || res.Status != ledger.StatusAccepted || !strings.Contains(res.Message, "suspended hospital hospital-2") {
		t.Fatalf("submit through follower %s: %v\n%s", follower.id, err, text)
	}
	for _, a := range auditors {
		proctest.WaitFor(t, 20*time.Second, a.id+" applying the suspension", func() bool {
			es, err := a.reader.Entries(ctx, int64(res.Index), 1)
			return err == nil && len(es.Entries) == 1 && es.Entries[0].Command != nil && es.Entries[0].Command.Kind == "suspend"
		})
	}
	if text, err := submit(); err == nil || !strings.Contains(err.Error()+text, "stale-suspension") {
		t.Fatalf("replayed suspension: %v\n%s", err, text)
	}
}
