package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/nzcfed/nzc/cmd/internal/sizing"
	"github.com/nzcfed/nzc/internal/syncbuf"
	"github.com/nzcfed/nzc/mechanism"
)

// An aggregator whose confident-gnmax threshold the federation's ensemble
// cannot reach (the 250-teacher preset for 3 hospitals of 30 teachers)
// refuses to start, saying what to set; sized for the ensemble, it starts
// and says what its plan allows.
func TestRunSizesTheMechanism(t *testing.T) {
	_, agg := federationOf(t, 3)
	unsized, err := mechanism.Preset(mechanism.ConfidentGNMax)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		mech    mechanism.Params
		refused string
	}{
		{"250-teacher preset", unsized, "threshold T=200 is not below the 90 teachers"},
		{"sized by init", agg.Mechanism, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := agg
			c.Mechanism, c.Listen, c.Ops.Listen, c.Outbox = tc.mech, "127.0.0.1:0", "", t.TempDir()
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
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- root.ExecuteContext(ctx) }()
			if tc.refused == "" {
				// It starts: wait for its plan, then stop it.
				deadline := time.Now().Add(30 * time.Second)
				for !strings.Contains(out.String(), "mechanism plan") {
					select {
					case err := <-done:
						t.Fatalf("the aggregator stopped: %v\n%s", err, out.String())
					case <-time.After(10 * time.Millisecond):
					}
					if time.Now().After(deadline) {
						t.Fatalf("no mechanism plan logged:\n%s", out.String())
					}
				}
				for _, w := range []string{"labels_per_default_cap=198", "lead_for_clean_vote=63", "unanimous_answered=0.63", "quorum_teachers=60", "unanimous_answered_at_quorum=0.41"} {
					if !strings.Contains(out.String(), w) {
						t.Errorf("the plan does not say %s:\n%s", w, out.String())
					}
				}
				cancel()
				<-done
				return
			}
			select {
			case err := <-done:
				if !errors.Is(err, sizing.ErrCannotWork) || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("err = %v, want one naming %q", err, tc.refused)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("the aggregator started with a mechanism its ensemble cannot reach:\n%s", out.String())
			}
		})
	}
}
