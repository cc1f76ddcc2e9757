package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nzcfed/nzc/federation/provision"
)

// Binaries are the party binaries, built from cmd/ of this module.
var Binaries = []string{"nzc-auditor", "nzc-aggregator", "nzc-teacher", "nzc-student"}

// Build compiles the named commands of this module (cmd/<name>) into dir
// with the Go toolchain; race builds them with the race detector.
func Build(ctx context.Context, dir string, race bool, names ...string) error {
	return build(ctx, dir, race, "", names)
}

// BuildWithTestHooks is Build with the build tag nzctest, which gives the
// binaries the fault tests' pause hook (package pause).
func BuildWithTestHooks(ctx context.Context, dir string, race bool, names ...string) error {
	return build(ctx, dir, race, "nzctest", names)
}

func build(ctx context.Context, dir string, race bool, tags string, names []string) error {
	if _, err := exec.LookPath("go"); err != nil {
		return fmt.Errorf("%w: building %s needs a Go toolchain; give prebuilt binaries instead", err, strings.Join(names, ", "))
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if race {
		args = append(args, "-race")
	}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	for _, b := range names {
		args = append(args, "github.com/nzcfed/nzc/cmd/"+b)
	}
	c := exec.CommandContext(ctx, "go", args...)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		return fmt.Errorf("build %s (%w: %s): build from the NZC source tree with a Go toolchain", strings.Join(names, ", "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// FreeAddrs returns n distinct loopback addresses (127.0.0.1:port) whose
// port was free for both TCP and UDP (QUIC) a moment ago.
func FreeAddrs(n int) ([]string, error) {
	var out []string
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for tries := 0; len(out) < n; tries++ {
		if tries > 50*n {
			return nil, errors.New("no free loopback ports: free some ports and try again")
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("listen on loopback: %w", err)
		}
		// Held open until every address is chosen, so none repeats.
		held = append(held, l)
		u, err := net.ListenPacket("udp", l.Addr().String())
		if err != nil {
			continue
		}
		u.Close()
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// Processes runs party binaries from Bin as processes in Dir, each one's
// standard output and error in its own log file in Logs, numbered in the
// order the runs started.
type Processes struct {
	Bin  string // directory of the binaries
	Dir  string // working directory of every process
	Logs string // directory of the log files

	mu    sync.Mutex
	procs []*Proc
	runs  int
}

// Proc is one run of a party binary.
type Proc struct {
	Name string
	Log  string // its log file

	cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's result, once done is closed
}

func (ps *Processes) command(ctx context.Context, name, bin string, env []string, args []string) (*exec.Cmd, string) {
	ps.mu.Lock()
	ps.runs++
	n := ps.runs
	ps.mu.Unlock()
	c := exec.CommandContext(ctx, filepath.Join(ps.Bin, bin), args...)
	c.Dir = ps.Dir
	c.Env = append(os.Environ(), env...)
	c.Cancel = func() error { return c.Process.Signal(os.Interrupt) }
	c.WaitDelay = 10 * time.Second
	return c, filepath.Join(ps.Logs, fmt.Sprintf("%02d-%s.log", n, name))
}

// Start runs a long-lived party; env adds variables ("KEY=value"). It runs
// until it exits, Stop or Kill, or StopAll.
func (ps *Processes) Start(name, bin string, env []string, args ...string) (*Proc, error) {
	c, logPath := ps.command(context.Background(), name, bin, env, args)
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	c.Stdout, c.Stderr = lf, lf
	if err := c.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Log: logPath, cmd: c, done: make(chan struct{})}
	go func() {
		p.err = c.Wait()
		lf.Close()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.procs = append(ps.procs, p)
	ps.mu.Unlock()
	return p, nil
}

// Run runs a one-shot command to its end and returns its standard output;
// its standard error goes to its log, whose end the error shows.
func (ps *Processes) Run(ctx context.Context, name, bin string, env []string, args ...string) ([]byte, error) {
	c, logPath := ps.command(ctx, name, bin, env, args)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	if werr := os.WriteFile(logPath, errb.Bytes(), 0o644); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return out.Bytes(), fmt.Errorf("%s %s: %w (log %s):\n%s", bin, strings.Join(args, " "), err, logPath, LastLines(errb.String(), 20))
	}
	return out.Bytes(), nil
}

// StopAll stops every process still running, newest first, and returns
// them all (for their logs).
func (ps *Processes) StopAll() []*Proc {
	ps.mu.Lock()
	procs := ps.procs
	ps.procs = nil
	ps.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		if !procs[i].Exited() {
			procs[i].Stop()
		}
	}
	return procs
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits for the process to exit, at most within, and returns its exit
// error.
func (p *Proc) Wait(within time.Duration) error {
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-p.done:
		return p.err
	case <-t.C:
		return fmt.Errorf("%s did not exit within %v", p.Name, within)
	}
}

// ExitCode is the exit status of an exited process (-1 if killed).
func (p *Proc) ExitCode() int {
	<-p.done
	return p.cmd.ProcessState.ExitCode()
}

// Kill sends SIGKILL — no shutdown code runs, as when a machine loses
// power — and waits for the process to be gone.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop interrupts the process and waits for it, killing it after 10s.
func (p *Proc) Stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.Kill()
	}
}

// LogText returns what the process has logged so far.
func (p *Proc) LogText() string {
	b, _ := os.ReadFile(p.Log)
	return string(b)
}

// LastLines returns the last n lines of s.
func LastLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// Free reports whether addr's port is free for both TCP and UDP now.
func Free(addr string) bool {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}

// FreePorts finds a base port whose federation ports (see Ports) for three
// auditors and the given number of parties are free.
func FreePorts(parties int) (provision.Ports, error) {
	for attempt := 0; attempt < 50; attempt++ {
		base := 20000 + int(time.Now().UnixNano()/1000%20000)/10*10 + attempt*7
		p := provision.Ports{Base: base}
		need := []int{p.Aggregator()}
		for i := range 3 {
			need = append(need, p.Raft(i), p.Intake(i), p.API(i), p.Dashboard(i))
		}
		for k := 1; k <= parties; k++ {
			need = append(need, p.Ops(k))
		}
		if !slices.ContainsFunc(need, func(port int) bool { return !Free(provision.Loopback(port)) }) {
			return p, nil
		}
	}
	return provision.Ports{}, errors.New("no free range of loopback ports found; free some ports or try again")
}
