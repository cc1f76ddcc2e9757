package main

import (
	"context"
	"errors"
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
	"github.com/nzcfed/nzc/federation/provision"
	"github.com/nzcfed/nzc/internal/syncbuf"
	"github.com/nzcfed/nzc/party/aggregator"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// An aggregator configured for 5 classes in a federation whose ledger
// registers 10 exits with an error naming both and the value to set, as
// soon as it reads the ledger, instead of serving batches it would all
// refuse.
func TestRunStopsOnAClassMismatch(t *testing.T) {
	fed, agg := federationOf(t, 1)

	// The auditor's budget reads: the ledger registers 10 classes.
	aud, err := fed.Party(crypto.RoleAuditor, fed.M.ByRole(crypto.RoleAuditor)[0].ID, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	l, err := quicnet.Listen("127.0.0.1:0", aud.Net, crypto.RoleAggregator, crypto.RoleHospital)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = l.Serve(ctx, quicnet.Mux{protocol.TypeBudgetRequest: {Roles: []crypto.Role{crypto.RoleAggregator},
			Handle: func(context.Context, *quicnet.Request) (protocol.MsgType, []byte, error) {
				return quicnet.Reply(&nzcpb.BudgetResponse{Classes: 10})
			}}}, nil)
	}()
	t.Cleanup(func() { cancel(); <-served; l.Close() })

	c := agg
	c.Classes, c.Auditors = 5, []string{l.Addr().String()}
	c.Listen, c.Ops.Listen, c.Outbox = "127.0.0.1:0", "", t.TempDir()
	raw, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "aggregator.yaml")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	var out syncbuf.Buffer
	root := newRootCommand()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"run", "--config", path})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	select {
	case err := <-done:
		var mm *aggregator.ClassMismatchError
		if !errors.As(err, &mm) || mm.Configured != 5 || mm.Registered != 10 {
			t.Fatalf("err = %v, want a class mismatch of 5 configured, 10 registered\n%s", err, out.String())
		}
		for _, s := range []string{"configured for 5 classes", "on 10 classes", "classes: 10"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("message %q does not say %q", err, s)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the aggregator still runs 30 s after start with another class count than the ledger's:\n%s", out.String())
	}
}

// federationOf provisions a federation of the given hospitals of 30
// teachers on 10 classes each (registered in its genesis), one auditor and
// one student, and returns it with the aggregator's configuration as
// nzc init writes it.
func federationOf(t *testing.T, hospitals int) (*launch.Federation, config.Aggregator) {
	t.Helper()
	fed, err := launch.Provision(filepath.Join(t.TempDir(), "fed"), provision.Spec{Hospitals: hospitals, Auditors: 1, Students: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := provision.WriteGenesis(fed.M, 30, 10); err != nil {
		t.Fatal(err)
	}
	cfgs, err := provision.PartyConfigs(fed.M, provision.Topology{BasePort: 7400})
	if err != nil {
		t.Fatal(err)
	}
	return fed, cfgs["aggregator"].(config.Aggregator)
}
