package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/config"
	"github.com/nzcfed/nzc/federation/launch"
	"github.com/nzcfed/nzc/federation/proctest"
	"github.com/nzcfed/nzc/federation/provision"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/party/aggregator"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// registrations is a ledger that holds one registration for each listed
// hospital and accepts nothing: enough for the aggregator to check a
// hospital's Hello.
type registrations struct {
	classes  uint64
	ensemble map[string]uint64
}

func (registrations) Submit(context.Context, []byte) (*nzcpb.LedgerResult, error) {
	return nil, fmt.Errorf("this ledger accepts no command")
}

func (r registrations) Budget(_ context.Context, req *nzcpb.BudgetRequest) (*nzcpb.BudgetResponse, error) {
	resp := &nzcpb.BudgetResponse{Classes: r.classes}
	for _, id := range req.GetHospitalIds() {
		if n, ok := r.ensemble[id]; ok {
			resp.Ensembles = append(resp.Ensembles, &nzcpb.RegisteredEnsemble{HospitalId: id, Teachers: n})
		}
	}
	return resp, nil
}

// A hospital whose ensemble is not the one the ledger registers for it is
// refused by the aggregator on every connection: the process exits non-zero
// within 10 s with the aggregator's reason, so that its service manager
// shows the failure, instead of reconnecting forever.
func TestRunStopsOnARefusedEnsemble(t *testing.T) {
	bin := proctest.Build(t, "github.com/nzcfed/nzc/cmd/nzc-teacher")
	dir := t.TempDir()
	fed, err := launch.Provision(filepath.Join(dir, "fed"), provision.Spec{Hospitals: 1, Auditors: 1, Students: 1})
	if err != nil {
		t.Fatal(err)
	}
	m := fed.M

	// The aggregator, in this process, holding hospital-1 to 5 teachers.
	g := launch.NewGroup(context.Background())
	t.Cleanup(func() { _ = g.Close() })
	keys, err := fed.AuditorKeys()
	if err != nil {
		t.Fatal(err)
	}
	agg, err := fed.Party(crypto.RoleAggregator, "aggregator", slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	a, err := launch.StartAggregator(g, agg, "127.0.0.1:0", aggregator.Config{
		OutboxDir: t.TempDir(), Mechanism: mechanism.Params{Mechanism: mechanism.GNMax, Sigma: 2},
		Quorum: 1, BatchDeadline: 5 * time.Second, LedgerTimeout: 5 * time.Second, Classes: 2, Ensemble: 5,
		Ledger: registrations{classes: 2, ensemble: map[string]uint64{"hospital-1": 5}}, AuditorKeys: keys,
	})
	if err != nil {
		t.Fatal(err)
	}

	// hospital-1 trains 3 teachers.
	var csv strings.Builder
	for i := range 60 {
		fmt.Fprintf(&csv, "%d,%d,%d\n", i%2*4, (i/2)%3, i%2)
	}
	data := filepath.Join(dir, "train.csv")
	if err := os.WriteFile(data, []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	h, _ := m.Party(crypto.RoleHospital, "hospital-1")
	c := config.DefaultTeacher()
	c.ID, c.Aggregator = h.ID, a.Addr
	c.TLS = config.TLS{CA: m.Path(m.CACert), Cert: m.Path(h.Cert), Key: m.Path(h.Key)}
	c.AgeIdentity, c.SigningKey = m.Path(h.AgeIdentity), m.Path(h.SigningKey)
	c.Models, c.State, c.Data = filepath.Join(dir, "models"), filepath.Join(dir, "state"), data
	c.Teachers, c.Model, c.Epochs = 3, "softmax", 1
	c.Ops.Listen = ""
	raw, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "hospital-1.yaml")
	if err := os.WriteFile(cfg, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	train := proctest.Start(t, "train", bin, nil, "train", "--config", cfg)
	proctest.WaitFor(t, 2*time.Minute, "training to end", train.Exited)
	if err := train.Stop(time.Minute); err != nil {
		t.Fatalf("train: %v\n%s", err, train.Output())
	}

	run := proctest.Start(t, "run", bin, nil, "run", "--config", cfg)
	began := time.Now()
	proctest.WaitFor(t, 20*time.Second, "the refused hospital to exit", run.Exited)
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("the refused hospital exited after %v, want within 10 s", took)
	}
	if err := run.Stop(time.Minute); err == nil {
		t.Fatalf("the refused hospital exited with status 0:\n%s", run.Output())
	}
	if out := run.Output(); !strings.Contains(out, "announced 3 teachers, but it is registered with 5") {
		t.Fatalf("the hospital's output does not say why it stopped:\n%s", out)
	}
}
