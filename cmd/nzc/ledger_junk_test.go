package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/crypto/cryptotest"
	"github.com/nzcfed/nzc/federation/proctest"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/party/auditor/intake"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// rssSlack is how far an auditor's resident memory may be from where it
// was after the junk below: 30 MB of junk, had it been logged, would
// exceed it on every auditor.
const rssSlack = 32 << 20

// residentBytes is a process's resident memory (VmRSS in /proc/PID/status).
func residentBytes(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// logMark is one auditor's tree size and its raft log's last index less
// its term: a new leader appends one entry of its own per term (which a
// loaded machine may cause), and nothing else grows the raft log while no
// command is proposed.
type logMark struct{ tree, indexTerm int64 }

func logMarks(t *testing.T, auditors []*auditorProcess) []logMark {
	t.Helper()
	var out []logMark
	for _, a := range auditors {
		var s logMark
		proctest.WaitFor(t, 20*time.Second, a.id+"'s status", func() bool {
			st, err := a.status(context.Background())
			s = logMark{st.Size, int64(st.Auditor.LastIndex) - int64(st.Auditor.Term)}
			return err == nil
		})
		out = append(out, s)
	}
	return out
}

func residents(t *testing.T, auditors []*auditorProcess) []int64 {
	t.Helper()
	var out []int64
	for _, a := range auditors {
		n, err := residentBytes(a.p.Pid())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

// checkUnharmed fails unless no auditor's log grew from before and every
// auditor's resident memory comes back within rssSlack of rss (waiting,
// as a collection may be due).
func checkUnharmed(t *testing.T, what string, auditors []*auditorProcess, before []logMark, rss []int64) {
	t.Helper()
	after := logMarks(t, auditors)
	for i, a := range auditors {
		if after[i].tree != before[i].tree || after[i].indexTerm > before[i].indexTerm {
			t.Fatalf("%s grew %s's log: tree %d → %d, raft index less term %d → %d", what, a.id, before[i].tree, after[i].tree, before[i].indexTerm, after[i].indexTerm)
		}
	}
	var now []int64
	if err := proctest.Poll(context.Background(), 60*time.Second, func() bool {
		now = residents(t, auditors)
		for i := range now {
			if now[i] > rss[i]+rssSlack {
				return false
			}
		}
		return true
	}); err != nil {
		for i, a := range auditors {
			t.Errorf("%s: %s resident %d MiB, was %d MiB", what, a.id, now[i]>>20, rss[i]>>20)
		}
		t.Fatalf("%s left an auditor more than %d MiB above its resident memory", what, rssSlack>>20)
	}
	for i, a := range auditors {
		t.Logf("%s: %s resident %d MiB → %d MiB, tree %d", what, a.id, rss[i]>>20, now[i]>>20, after[i].tree)
	}
}

// TestJunkLeavesTheLogAndMemory runs three nzc-auditor processes on
// loopback and attacks them as one auditor's certificate and as the
// aggregator's: 30 junk commands of 1 MB forwarded to the leader over the
// forwarding channel with a follower's certificate, then 30 charges signed
// by the aggregator naming 4,000 hospitals nobody registered, sent through
// every intake in turn. Each is refused before it is proposed, every
// auditor's tree size and raft log stay where they were, and every
// auditor's resident memory comes back within 32 MiB. (Forwarded bytes
// were proposed unread, and the intake proposed charges unchecked: each
// refused command became an entry keeping its bytes on every auditor,
// 100 of 1 MB took each from ~20 to over 400 MiB resident.)
func TestJunkLeavesTheLogAndMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three auditor processes")
	}
	t.Setenv("NZC_CHECKPOINTS", t.TempDir())
	_, m, auditors := startAuditorProcesses(t, "nzc.test/junk")
	ctx := context.Background()

	leader, attacker := leaderAndFollower(t, ctx, auditors)
	var files crypto.PartyFiles
	for _, p := range m.ByRole(crypto.RoleAuditor) {
		if p.ID == attacker.id {
			files = p
		}
	}
	ca, err := crypto.LoadCert(m.Path(m.CACert))
	if err != nil {
		t.Fatal(err)
	}
	cred, err := crypto.LoadCredential(m.Path(files.Cert), m.Path(files.Key))
	if err != nil {
		t.Fatal(err)
	}
	asAttacker := crypto.ClientTLS(ca, cred)

	before, rss := logMarks(t, auditors), residents(t, auditors)

	// One auditor's certificate: 30 MB of junk forwarded to the leader
	// (the leader's address may move under load: forward to whichever
	// auditor its status names, and count only refusals).
	rng := rand.New(rand.NewPCG(3, 4))
	junk := make([]byte, 1_000_000)
	for i := range junk {
		junk[i] = byte(rng.Uint32())
	}
	give := time.Now().Add(3 * time.Minute)
	for i := 0; i < 30; {
		if time.Now().After(give) {
			t.Fatalf("only %d of 30 junk commands answered in 3 minutes: no leader kept", i)
		}
		junk[0], junk[1] = byte(i), byte(i>>8) // 30 different commands
		target := leader
		if s, err := attacker.status(ctx); err == nil {
			for _, a := range auditors {
				if a.id == s.Auditor.LeaderID {
					target = a
				}
			}
		}
		fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, _, err := raftnode.Forward(fctx, target.raft, asAttacker, junk)
		cancel()
		var np *raftnode.NotProposedError
		var nl *raftnode.NotLeaderError
		switch {
		case errors.As(err, &nl), errors.Is(err, raftnode.ErrTimeout):
			continue // leadership moved, or a loaded machine: send it again
		case errors.As(err, &np):
			if r, derr := ledger.DecodeResult(np.Refusal); derr != nil || r.Code != ledger.CodeMalformed {
				t.Fatalf("junk command %d: refusal %+v (%v), want malformed", i, r, derr)
			}
		case errors.Is(err, raftnode.ErrPeerBudget):
		default: // proposed: the checks below say what it cost
			t.Errorf("junk command %d forwarded by %s to %s: %v, want it refused before proposal", i, attacker.id, target.id, err)
		}
		i++
	}
	checkUnharmed(t, "30 forwarded junk commands of 1 MB", auditors, before, rss)

	// The aggregator's certificate and key: signed charges naming 4,000
	// unknown hospitals, through each intake in turn.
	agg := m.ByRole(crypto.RoleAggregator)[0]
	netCfg, err := quicnet.LoadConfig(m.Path(m.CACert), m.Path(agg.Cert), m.Path(agg.Key))
	if err != nil {
		t.Fatal(err)
	}
	aggKey := cryptotest.SigningKey(t, m, agg)
	student := m.ByRole(crypto.RoleStudent)[0].ID
	hospitals := make([]string, 4000)
	for i := range hospitals {
		hospitals[i] = fmt.Sprintf("unknown-hospital-%06d-%s", i, strings.Repeat("x", 80))
	}
	curve := mechanism.Gaussian(mechanism.DefaultGrid(), 1.4, 40)
	var clients []*intake.Client
	for _, a := range auditors {
		lc, err := intake.NewClient(netCfg, []string{a.intake})
		if err != nil {
			t.Fatal(err)
		}
		defer lc.Close()
		clients = append(clients, lc)
	}
	before, rss = logMarks(t, auditors), residents(t, auditors)
	for i := range 30 {
		batch := fmt.Sprintf("junk-%d", i)
		cmd, err := ledger.Sign(&ledger.Charge{BatchID: batch, Student: student, Hospitals: hospitals, Mechanism: "gnmax",
			Params: mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Classes: 10, Sigma: 40}.LedgerParams(), Queries: 1, Answers: 1,
			Curve: curve.Values(), AnswersHash: sha256.Sum256([]byte(batch)), Timestamp: time.Now().UnixNano()}, agg.ID, aggKey)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			t.Logf("each junk charge is %d bytes", len(cmd))
		}
		var res *nzcpb.LedgerResult
		if err := proctest.Poll(ctx, 60*time.Second, func() bool {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			res, err = clients[i%len(clients)].Submit(sctx, cmd)
			return err == nil
		}); err != nil || res.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_REJECTED {
			t.Fatalf("junk charge %d through %s's intake: %v %v, want it rejected", i, auditors[i%len(auditors)].id, res, err)
		}
	}
	checkUnharmed(t, "30 junk charges from the aggregator", auditors, before, rss)
}
