// Package proctest runs the federation's binaries as real processes in
// tests: it builds a main package, picks free loopback ports, starts a
// process with its output captured, waits on conditions with a bounded
// deadline, and stops a process gently or with SIGKILL.
//
// Every process started is killed when the test ends, and a failing test
// prints the tail of each process's output.
package proctest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nzcfed/nzc/federation/launch"
	"github.com/nzcfed/nzc/internal/syncbuf"
)

// Build compiles the main package pkg (an import path of this module's
// cmd/, such as "github.com/nzcfed/nzc/cmd/nzc-auditor") into a temporary
// directory and returns the binary's path. When the test binary is built
// with -race, so is the process, which also reuses the test's compiled
// packages.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go toolchain to build %s: %v", pkg, err)
	}
	dir := t.TempDir()
	name, ok := strings.CutPrefix(pkg, "github.com/nzcfed/nzc/cmd/")
	if !ok {
		t.Fatalf("build %s: not a command of this module's cmd/", pkg)
	}
	if err := launch.Build(context.Background(), dir, raceEnabled, name); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, name)
}

// FreeTCP returns n distinct loopback addresses (127.0.0.1:port) whose
// TCP ports were free a moment ago.
func FreeTCP(t testing.TB, n int) []string {
	t.Helper()
	addrs, err := launch.FreeAddrs(n)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// FreeUDP returns n distinct loopback addresses whose UDP ports (for QUIC)
// were free a moment ago.
func FreeUDP(t testing.TB, n int) []string { return FreeTCP(t, n) }

// Process is a running (or exited) child process.
type Process struct {
	Name string
	t    testing.TB
	bin  string
	args []string
	env  []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan struct{}
	err  error // Wait's result, once done is closed
	runs int
}

// Start runs bin with args and the extra environment variables env
// ("KEY=value"), capturing its standard output and error. The process is
// killed at the end of the test.
func Start(t testing.TB, name, bin string, env []string, args ...string) *Process {
	t.Helper()
	p := &Process{Name: name, t: t, bin: bin, args: args, env: env, out: &syncbuf.Buffer{}}
	p.start()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("--- output of %s (last 4 KiB):\n%s", p.Name, tail(p.Output(), 4096))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

func (p *Process) start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	if p.runs > 0 {
		fmt.Fprintf(p.out, "\n=== proctest: restart %d of %s ===\n", p.runs, p.Name)
	}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start %s: %v", p.Name, err)
	}
	p.runs++
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
}

// Restart starts the process again with the same arguments; it must have
// exited (Kill or Stop it first).
func (p *Process) Restart() {
	p.t.Helper()
	if !p.Exited() {
		p.t.Fatalf("restart %s: it is still running", p.Name)
	}
	p.start()
}

// Pid returns the operating-system id of the current run.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// Exited reports whether the current run has ended.
func (p *Process) Exited() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// Kill sends SIGKILL — no chance to clean up, as when a machine loses
// power — and waits for the process to be gone.
func (p *Process) Kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// Stop sends SIGTERM and waits up to grace for the process to exit, then
// kills it. It returns the process's exit error, if it exited by itself.
func (p *Process) Stop(grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		p.Kill()
		return fmt.Errorf("%s did not stop within %v of SIGTERM; killed", p.Name, grace)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Output returns everything the process wrote so far, across restarts.
func (p *Process) Output() string { return p.out.String() }

// ErrTimeout is returned by Poll when the condition did not hold in time.
var ErrTimeout = launch.ErrTimeout

// WaitFor polls cond every 20ms until it returns true, and fails the test
// naming what it waited for if it does not within the given time.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := Poll(context.Background(), within, cond); err != nil {
		t.Fatalf("waited %v for %s: %v", within, what, err)
	}
}

// Poll calls cond every 20ms until it returns true, ctx ends, or within
// passes (ErrTimeout).
func Poll(ctx context.Context, within time.Duration, cond func() bool) error {
	return launch.Poll(ctx, within, 20*time.Millisecond, cond)
}

// WaitHTTP waits until GET url answers 200, using client (nil: the default
// client), and fails the test if it does not within the given time or the
// process p (when not nil) exits first.
func WaitHTTP(t testing.TB, within time.Duration, client *http.Client, url string, p *Process) {
	t.Helper()
	if client == nil {
		client = http.DefaultClient
	}
	last := "no answer yet"
	ok := func() bool {
		if p != nil && p.Exited() {
			return true
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false
		}
		defer resp.Body.Close()
		last = "status " + strconv.Itoa(resp.StatusCode)
		return resp.StatusCode == http.StatusOK
	}
	if err := Poll(context.Background(), within, ok); err != nil {
		t.Fatalf("waited %v for GET %s to answer 200 (last: %s)", within, url, last)
	}
	if p != nil && p.Exited() {
		t.Fatalf("%s exited while waiting for %s", p.Name, url)
	}
}
