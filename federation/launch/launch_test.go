package launch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/provision"
)

// The test binary doubles as a party: with LAUNCH_TEST_PARTY set it prints
// to both outputs and, for "serve", waits for an interrupt.
func TestMain(m *testing.M) {
	switch os.Getenv("LAUNCH_TEST_PARTY") {
	case "":
		os.Exit(m.Run())
	case "serve":
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt)
		fmt.Fprintln(os.Stderr, "serving", os.Args[1:])
		<-sig
		fmt.Fprintln(os.Stderr, "interrupted")
		os.Exit(0)
	case "once":
		fmt.Println("the answer")
		fmt.Fprintln(os.Stderr, "a log line")
		if len(os.Args) > 1 && os.Args[1] == "fail" {
			os.Exit(3)
		}
		os.Exit(0)
	}
}

func processes(t *testing.T) *Processes {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ps := &Processes{Bin: filepath.Dir(exe), Dir: dir, Logs: dir}
	t.Cleanup(func() { ps.StopAll() })
	return ps
}

func TestProcesses(t *testing.T) {
	ps := processes(t)
	exe, _ := os.Executable()
	bin := filepath.Base(exe)

	p, err := ps.Start("party", bin, []string{"LAUNCH_TEST_PARTY=serve"}, "run", "--config", "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := Poll(context.Background(), 10*time.Second, 5*time.Millisecond, func() bool { return strings.Contains(p.LogText(), "serving [run --config x.yaml]") }); err != nil {
		t.Fatalf("the party did not log its start: %v (%q)", err, p.LogText())
	}
	if p.Exited() {
		t.Fatal("a serving party exited")
	}
	p.Stop()
	if !p.Exited() || p.ExitCode() != 0 || !strings.Contains(p.LogText(), "interrupted") {
		t.Fatalf("after Stop: exited %v, code %d, log %q", p.Exited(), p.ExitCode(), p.LogText())
	}

	k, err := ps.Start("victim", bin, []string{"LAUNCH_TEST_PARTY=serve"})
	if err != nil {
		t.Fatal(err)
	}
	k.Kill()
	if k.ExitCode() != -1 || strings.Contains(k.LogText(), "interrupted") {
		t.Fatalf("a killed party exited with %d and ran its shutdown: %q", k.ExitCode(), k.LogText())
	}
	if k.Log == p.Log {
		t.Fatalf("two runs share the log %s", k.Log)
	}

	out, err := ps.Run(context.Background(), "once", bin, []string{"LAUNCH_TEST_PARTY=once"})
	if err != nil || string(out) != "the answer\n" {
		t.Fatalf("Run: %q %v", out, err)
	}
	_, err = ps.Run(context.Background(), "fails", bin, []string{"LAUNCH_TEST_PARTY=once"}, "fail")
	if err == nil || !strings.Contains(err.Error(), "a log line") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("a failing run: %v, want its exit status and the end of its log", err)
	}

	left, err := ps.Start("left", bin, []string{"LAUNCH_TEST_PARTY=serve"})
	if err != nil {
		t.Fatal(err)
	}
	if all := ps.StopAll(); len(all) != 3 || !left.Exited() {
		t.Fatalf("StopAll returned %d processes, the running one exited: %v", len(all), left.Exited())
	}
	if _, err := ps.Start("missing", "no-such-binary", nil); err == nil {
		t.Fatal("started a binary that does not exist")
	}
}

func TestFreeAddrs(t *testing.T) {
	addrs, err := FreeAddrs(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] || !strings.HasPrefix(a, "127.0.0.1:") || !Free(a) {
			t.Fatalf("address %s: repeated %v, or not free on loopback", a, seen[a])
		}
		seen[a] = true
	}
}

func TestPoll(t *testing.T) {
	n := 0
	if err := Poll(context.Background(), 10*time.Second, time.Millisecond, func() bool { n++; return n == 3 }); err != nil || n != 3 {
		t.Fatalf("Poll: %v after %d calls", err, n)
	}
	if err := Poll(context.Background(), 20*time.Millisecond, time.Millisecond, func() bool { return false }); !errors.Is(err, ErrTimeout) {
		t.Fatalf("a condition that never holds: %v, want ErrTimeout", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Poll(ctx, time.Hour, time.Millisecond, func() bool { return false }); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled poll: %v, want context.Canceled", err)
	}
}

func TestGroup(t *testing.T) {
	g := NewGroup(context.Background())
	boom := errors.New("boom")
	g.Go("quiet", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	g.Go("failing", func(context.Context) error { return boom })
	stopped := false
	stop := g.Start("crashable", func(ctx context.Context) error { <-ctx.Done(); stopped = true; return nil })
	stop()
	if !stopped {
		t.Fatal("stop returned before the party ended")
	}
	if err := g.Close(); !errors.Is(err, boom) || !strings.Contains(err.Error(), "failing: boom") || strings.Contains(err.Error(), "quiet") {
		t.Fatalf("Close: %v, want only the failing party's error, named", err)
	}
}

func TestFederation(t *testing.T) {
	f, err := Provision(filepath.Join(t.TempDir(), "fed"), provision.Spec{Hospitals: 2, Auditors: 3, Students: 1})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := f.AuditorKeys()
	if err != nil || len(keys) != 3 || !strings.HasPrefix(keys[0], "auditor-1+") {
		t.Fatalf("auditor keys %v %v", keys, err)
	}
	rs, err := f.HospitalRecipients()
	if err != nil || len(rs) != 2 {
		t.Fatalf("recipients %v %v", rs, err)
	}
	p, err := f.Party(crypto.RoleHospital, "hospital-2", slog.New(slog.DiscardHandler))
	if err != nil || p.SigningKey == nil || p.Net.Credential == nil || !p.Identity.Recipient().Equal(rs[1]) {
		t.Fatalf("hospital-2: %+v %v", p, err)
	}
	st, err := f.Party(crypto.RoleStudent, "student-1", slog.New(slog.DiscardHandler))
	if err != nil || st.SigningKey != nil {
		t.Fatalf("a student has no signing key: %+v %v", st, err)
	}
	if _, err := f.Party(crypto.RoleHospital, "hospital-9", slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("loaded a party the federation does not have")
	}
	r, err := f.Verify([]byte("not an export"))
	if err != nil || r.OK {
		t.Fatalf("garbage verified: %+v %v", r, err)
	}
}
