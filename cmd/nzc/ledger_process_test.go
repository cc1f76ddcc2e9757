package main

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/crypto/cryptotest"
	"github.com/nzcfed/nzc/federation/config"
	"github.com/nzcfed/nzc/federation/proctest"
	"github.com/nzcfed/nzc/federation/provision"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/party/auditor/compliance"
	"github.com/nzcfed/nzc/party/auditor/intake"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// auditorProcess is one nzc-auditor process of a test cluster.
type auditorProcess struct {
	id, raft, intake, api, ops string
	dashboard                  string
	p                          *proctest.Process
	reader                     *compliance.Client
}

func (a *auditorProcess) status(ctx context.Context) (compliance.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return a.reader.Status(ctx)
}

// startAuditorProcesses provisions a federation of three auditors, two
// hospitals and a student in a temporary directory, writes each auditor's
// configuration where nzc ledger finds its compliance API (DIR/ID.yaml),
// starts the three nzc-auditor processes on free loopback ports, founding
// the cluster together, and returns once each is ready and has applied the
// genesis.
func startAuditorProcesses(t *testing.T, origin string) (dir string, m *crypto.Manifest, auditors []*auditorProcess) {
	t.Helper()
	bin := proctest.Build(t, "github.com/nzcfed/nzc/cmd/nzc-auditor")

	dir = filepath.Join(t.TempDir(), "fed")
	m, err := provision.Provision(dir, provision.Spec{Hospitals: 2, Auditors: 3, Students: 1})
	if err != nil {
		t.Fatal(err)
	}
	adminKey, err := m.AdminSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	genesis, err := provision.GenesisCommands(m, adminKey, origin, time.Unix(1_700_000_000, 0))
	if err != nil {
		t.Fatal(err)
	}
	genesisPath := filepath.Join(dir, "genesis.json")
	if err := provision.WriteGenesisFile(genesisPath, genesis); err != nil {
		t.Fatal(err)
	}

	// Three auditors on free loopback ports, founding the cluster together.
	parties := m.ByRole(crypto.RoleAuditor)
	tcp, udp := proctest.FreeTCP(t, 4*len(parties)), proctest.FreeUDP(t, len(parties))
	var peers []string
	for i, p := range parties {
		a := &auditorProcess{id: p.ID, raft: tcp[4*i], api: tcp[4*i+1], ops: tcp[4*i+2], dashboard: tcp[4*i+3], intake: udp[i]}
		if a.reader, err = compliance.NewClientAs(a.api, m, string(crypto.RoleCompliance)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.reader.Close)
		auditors = append(auditors, a)
		peers = append(peers, p.ID+"="+a.raft)
	}
	for i, p := range parties {
		a := auditors[i]
		cfg := config.DefaultAuditor()
		cfg.ID, cfg.DataDir, cfg.Raft, cfg.Listen, cfg.API = p.ID, filepath.Join(dir, p.ID, "data"), a.raft, a.intake, a.api
		cfg.Bootstrap, cfg.Peers, cfg.Genesis = true, peers, genesisPath
		cfg.TLS = config.TLS{CA: m.Path(m.CACert), Cert: m.Path(p.Cert), Key: m.Path(p.Key)}
		cfg.SigningKey, cfg.Ops.Listen, cfg.Log.Level = m.Path(p.SigningKey), a.ops, "info"
		cfg.Dashboard = a.dashboard
		b, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, p.ID+".yaml")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		a.p = proctest.Start(t, p.ID, bin, nil, "run", "--config", path)
	}
	for _, a := range auditors {
		proctest.WaitHTTP(t, 20*time.Second, nil, "http://"+a.ops+"/readyz", a.p)
		proctest.WaitHTTP(t, 20*time.Second, nil, "http://"+a.dashboard+"/api/overview", a.p)
	}
	ctx := context.Background()
	// The genesis and the student's registration are applied once.
	proctest.WaitFor(t, 20*time.Second, "the genesis on every auditor", func() bool {
		for _, a := range auditors {
			if s, err := a.status(ctx); err != nil || s.Size < int64(len(genesis)) {
				return false
			}
		}
		return true
	})
	return dir, m, auditors
}

// TestAuditorProcessesSurviveLeaderKill runs three nzc-auditor processes
// on loopback, streams signed charges through their intakes from four
// submitters, SIGKILLs the leader in the middle, restarts it, and checks
// that every acknowledged charge is in the log exactly once, that the three
// replicas reach the same Merkle root, and that the export verifies. Then it
// saves a follower's snapshot, stops another follower, restores it from the
// snapshot, and checks it catches up to the same root. It logs how long the
// stream stalled after the kill and how many retries the ledger answered as
// duplicates.
func TestAuditorProcessesSurviveLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three auditor processes")
	}
	began := time.Now()
	dir, m, auditors := startAuditorProcesses(t, "nzc.test/processes")
	ctx := context.Background()

	// The aggregator's client of the auditors' intakes.
	agg := m.ByRole(crypto.RoleAggregator)[0]
	aggKey := cryptotest.SigningKey(t, m, agg)
	netCfg, err := quicnet.LoadConfig(m.Path(m.CACert), m.Path(agg.Cert), m.Path(agg.Key))
	if err != nil {
		t.Fatal(err)
	}
	var intakes []string
	for _, a := range auditors {
		intakes = append(intakes, a.intake)
	}
	// submit proposes cmd until an auditor acknowledges it as committed
	// (or as a duplicate of a committed one), trying each attempt for at
	// most 3s, as the aggregator does with a pending batch.
	submit := func(lc *intake.Client, cmd []byte) (*nzcpb.LedgerResult, error) {
		var res *nzcpb.LedgerResult
		var last error
		err := proctest.Poll(ctx, 30*time.Second, func() bool {
			actx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			res, last = lc.Submit(actx, cmd)
			return last == nil
		})
		if err != nil {
			return nil, fmt.Errorf("not acknowledged: %w (last error: %v)", err, last)
		}
		if c := res.GetCode(); c != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED && c != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_DUPLICATE {
			return res, fmt.Errorf("refused: %v %s", c, res.GetReason())
		}
		return res, nil
	}
	lc, err := intake.NewClient(netCfg, intakes)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	// The auditors check an account command's stamp against their clocks.
	ts := time.Now().UnixNano()
	var hospitals []string
	for _, h := range m.ByRole(crypto.RoleHospital) {
		key := cryptotest.SigningKey(t, m, h)
		cmd, err := ledger.Sign(&ledger.OpenAccount{Hospital: h.ID, CapEpsilon: 8, CapDelta: 1e-5, Timestamp: ts}, h.ID, key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := submit(lc, cmd); err != nil {
			t.Fatalf("open %s's account: %v", h.ID, err)
		}
		hospitals = append(hospitals, h.ID)
	}

	// Four submitters, 15 charges each; the leader is killed once 20 are
	// acknowledged.
	student := m.ByRole(crypto.RoleStudent)[0].ID
	curve := mechanism.RDPDataIndependentGaussian(mechanism.DefaultGrid(), 400).Times(10).Values()
	charge := func(batch string, i int) []byte {
		cmd, err := ledger.Sign(&ledger.Charge{BatchID: batch, Student: student, Hospitals: hospitals, Mechanism: "gnmax",
			Params: mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Classes: 10, Sigma: 400}.LedgerParams(), Queries: 10, Answers: 10, Curve: curve,
			AnswersHash: sha256.Sum256([]byte(batch)), Timestamp: ts + int64(i)}, agg.ID, ed25519.PrivateKey(aggKey))
		if err != nil {
			t.Error(err)
		}
		return cmd
	}
	const submitters, perSubmitter, killAfter = 4, 15, 20
	var (
		acked   atomic.Int64
		dups    atomic.Int64
		mu      sync.Mutex
		ackedID []string
		ackedAt []time.Time
		errs    []error
		wg      sync.WaitGroup
	)
	for s := range submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lc, err := intake.NewClient(netCfg, append(intakes[s%3:], intakes[:s%3]...))
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			defer lc.Close()
			for i := range perSubmitter {
				batch := fmt.Sprintf("batch-%d-%02d", s, i)
				res, err := submit(lc, charge(batch, s*100+i))
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s: %w", batch, err))
					mu.Unlock()
					return
				}
				if res.GetCode() == nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_DUPLICATE {
					dups.Add(1)
				}
				mu.Lock()
				ackedID = append(ackedID, batch)
				ackedAt = append(ackedAt, time.Now())
				mu.Unlock()
				acked.Add(1)
			}
		}()
	}
	proctest.WaitFor(t, 30*time.Second, fmt.Sprintf("%d acknowledged charges", killAfter), func() bool { return acked.Load() >= killAfter })
	var leader *auditorProcess
	proctest.WaitFor(t, 10*time.Second, "an auditor to name the leader", func() bool {
		s, err := auditors[0].status(ctx)
		for _, a := range auditors {
			if err == nil && a.id == s.Auditor.LeaderID {
				leader = a
				return true
			}
		}
		return false
	})
	leader.p.Kill()
	killedAt, killTime := acked.Load(), time.Now()
	t.Logf("killed the leader %s (SIGKILL) after %d acknowledged charges", leader.id, killedAt)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("submissions failed: %v", errs)
	}
	var stall time.Duration
	after := 0
	for _, at := range ackedAt {
		if at.After(killTime) {
			if after == 0 || at.Sub(killTime) < stall {
				stall = at.Sub(killTime)
			}
			after++
		}
	}
	t.Logf("first charge acknowledged %v after the kill; %d acknowledged after it; %d retries answered as duplicates (charged once)",
		stall.Round(time.Millisecond), after, dups.Load())
	if killedAt >= submitters*perSubmitter {
		t.Fatalf("every charge was acknowledged before the kill: the stream was not interrupted")
	}

	leader.p.Restart()
	proctest.WaitHTTP(t, 20*time.Second, nil, "http://"+leader.ops+"/readyz", leader.p)

	// All three replicas reach the same size and root.
	var final compliance.Status
	proctest.WaitFor(t, 20*time.Second, "the three auditors to hold the same log", func() bool {
		var ss []compliance.Status
		for _, a := range auditors {
			s, err := a.status(ctx)
			if err != nil {
				return false
			}
			ss = append(ss, s)
		}
		for _, s := range ss[1:] {
			if s.Size != ss[0].Size || s.Root != ss[0].Root {
				return false
			}
		}
		final = ss[0]
		return true
	})

	// Every acknowledged charge is in the log once; retries are recorded
	// as duplicates, charging nothing.
	out := filepath.Join(t.TempDir(), "ledger.export")
	if text, err := runNZC(t, "ledger", "export", "--api", leader.api, "--federation", dir, "--out", out); err != nil {
		t.Fatalf("export from the restarted auditor: %v\n%s", err, text)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	x, err := ledger.DecodeExport(b)
	if err != nil {
		t.Fatal(err)
	}
	accepted := map[string]int{}
	for _, raw := range x.Entries {
		e, err := compliance.DecodeEntry(raw)
		if err != nil {
			t.Fatal(err)
		}
		if e.Command != nil && e.Command.Kind == "charge" && e.Status == "accepted" {
			accepted[e.Command.Body["batch"].(string)]++
		}
	}
	for _, id := range ackedID {
		if accepted[id] != 1 {
			t.Errorf("acknowledged charge %s is accepted %d times in the log", id, accepted[id])
		}
	}
	if len(ackedID) != submitters*perSubmitter || len(accepted) != len(ackedID) {
		t.Fatalf("%d charges acknowledged, %d accepted in the log; want %d", len(ackedID), len(accepted), submitters*perSubmitter)
	}
	accounts, err := leader.reader.Accounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, acc := range accounts {
		if acc.Charges != submitters*perSubmitter || acc.Answers != 10*submitters*perSubmitter {
			t.Errorf("hospital %s: %d charges, %d answers; want %d, %d", acc.Hospital, acc.Charges, acc.Answers, submitters*perSubmitter, 10*submitters*perSubmitter)
		}
	}

	text, err := runNZC(t, "ledger", "verify", "--export", out, "--federation", dir)
	if err != nil {
		t.Fatalf("the export does not verify: %v\n%s", err, text)
	}
	if !strings.Contains(text, fmt.Sprintf("VERIFIED: ledger nzc.test/processes, %d entries", len(x.Entries))) {
		t.Fatalf("verify output:\n%s", text)
	}
	t.Logf("%d entries, root %s on all three auditors; %v after the build", final.Size, final.Root, time.Since(began).Round(time.Millisecond))

	// One auditor's operator asking, with the official command, to join at
	// another auditor's raft address is refused and changes nothing (it
	// removed that auditor, and status still said all was well).
	rogue, victim := auditors[2], auditors[1]
	if text, err := runNZC(t, "ledger", "join", "--as", rogue.id, "--id", rogue.id, "--addr", victim.raft, "--api", rogue.api, "--federation", dir); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("%s joining at %s's address: %v, want 403\n%s", rogue.id, victim.id, err, text)
	}

	// Every auditor at the API its configuration in the directory names,
	// compared, raft's members with the ledger's auditors; the export is
	// fresh.
	text, err = runNZC(t, "ledger", "status", "--federation", dir, "--format", "json")
	var views ledgerStatus
	if err != nil || json.NewDecoder(strings.NewReader(text)).Decode(&views) != nil || views.Asked != 3 || views.Answered != 3 ||
		!views.Consistent || views.Largest == nil || views.Largest.Size < final.Size || len(views.Membership) != 0 {
		t.Fatalf("status of every auditor: %v %+v\n%s", err, views, text)
	}
	if text, err := runNZC(t, "ledger", "verify", "--export", out, "--federation", dir, "--max-age", "1h"); err != nil {
		t.Fatalf("a fresh export failed --max-age: %v\n%s", err, text)
	}

	// Back up one follower through its own API, stop another, move on
	// without it, and restore it from the backup: it catches up from the
	// snapshot to the same log.
	s, err := auditors[0].status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var followers []*auditorProcess
	for _, a := range auditors {
		if a.id != s.Auditor.LeaderID {
			followers = append(followers, a)
		}
	}
	donor, target := followers[0], followers[1]
	snap := filepath.Join(t.TempDir(), donor.id+".snapshot")
	cp := filepath.Join(t.TempDir(), "last-audit.checkpoint")
	if text, err := runNZC(t, "ledger", "status", "--api", donor.api, "--federation", dir, "--save-checkpoint", cp); err != nil {
		t.Fatalf("status --save-checkpoint: %v\n%s", err, text)
	}
	if text, err := runNZC(t, "ledger", "snapshot", "save", "--api", donor.api, "--federation", dir, "--as", donor.id, "--out", snap); err != nil {
		t.Fatalf("snapshot save: %v\n%s", err, text)
	}
	if err := target.p.Stop(10 * time.Second); err != nil {
		t.Fatalf("stop %s: %v", target.id, err)
	}
	// A client of the two running auditors: a QUIC connection to a stopped
	// one is only given up at the attempt's deadline.
	lc2, err := intake.NewClient(netCfg, []string{donor.intake})
	if err != nil {
		t.Fatal(err)
	}
	defer lc2.Close()
	for i := range 5 {
		if _, err := submit(lc2, charge(fmt.Sprintf("after-restore-%d", i), 1000+i)); err != nil {
			t.Fatal(err)
		}
	}
	text, err = runNZC(t, "ledger", "snapshot", "restore", "--data-dir", filepath.Join(dir, target.id, "data"), "--in", snap, "--checkpoint", cp, "--federation", dir)
	if err != nil || !strings.Contains(text, "kept at") || !strings.Contains(text, "extends the cosigned checkpoints") {
		t.Fatalf("snapshot restore: %v\n%s", err, text)
	}
	target.p.Restart()
	proctest.WaitHTTP(t, 20*time.Second, nil, "http://"+target.ops+"/readyz", target.p)
	proctest.WaitFor(t, 20*time.Second, "the restored auditor to catch up", func() bool {
		a, err1 := target.status(ctx)
		b, err2 := donor.status(ctx)
		return err1 == nil && err2 == nil && a.Size == final.Size+5 && a.Size == b.Size && a.Root == b.Root
	})
	t.Logf("%s restored from %s's snapshot and caught up; %v after the build", target.id, donor.id, time.Since(began).Round(time.Millisecond))
}
