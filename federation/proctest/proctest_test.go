package proctest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary act as the child process: with
// PROCTEST_SERVE set it serves /readyz there until SIGTERM.
func TestMain(m *testing.M) {
	if addr := os.Getenv("PROCTEST_SERVE"); addr != "" {
		os.Exit(serve(addr))
	}
	os.Exit(m.Run())
}

func serve(addr string) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Println("listen:", err)
		return 2
	}
	fmt.Println("serving", addr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })}
	go func() { _ = srv.Serve(ln) }()
	<-ctx.Done()
	_ = srv.Close()
	fmt.Println("stopped")
	return 0
}

func TestProcessLifecycle(t *testing.T) {
	addr := FreeTCP(t, 1)[0]
	p := Start(t, "child", os.Args[0], []string{"PROCTEST_SERVE=" + addr})
	WaitHTTP(t, 10*time.Second, nil, "http://"+addr+"/readyz", p)
	if p.Exited() || !strings.Contains(p.Output(), "serving "+addr) {
		t.Fatalf("exited %v, output %q", p.Exited(), p.Output())
	}

	p.Kill()
	if !p.Exited() {
		t.Fatal("still running after Kill")
	}
	if strings.Contains(p.Output(), "stopped") {
		t.Fatal("SIGKILL let the process clean up")
	}
	var ee *exec.ExitError
	if err := p.err; !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("exit %v, want killed by SIGKILL", p.err)
	}

	p.Restart()
	WaitHTTP(t, 10*time.Second, nil, "http://"+addr+"/readyz", p)
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if !strings.Contains(p.Output(), "restart 1 of child") || !strings.HasSuffix(strings.TrimSpace(p.Output()), "stopped") {
		t.Fatalf("output %q", p.Output())
	}
}

func TestWaitForTimesOut(t *testing.T) {
	start := time.Now()
	if err := Poll(context.Background(), 100*time.Millisecond, func() bool { return false }); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Poll: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Poll took %v to give up after 100ms", d)
	}
	n := 0
	if err := Poll(context.Background(), 10*time.Second, func() bool { n++; return n == 3 }); err != nil || n != 3 {
		t.Fatalf("Poll: %v after %d calls", err, n)
	}
}

func TestFreePorts(t *testing.T) {
	seen := map[string]bool{}
	for _, a := range append(FreeTCP(t, 4), FreeUDP(t, 4)...) {
		if !strings.HasPrefix(a, "127.0.0.1:") {
			t.Fatalf("address %s is not on loopback", a)
		}
		seen[a] = true
	}
	if len(seen) < 5 { // TCP and UDP may share a number; each set is distinct
		t.Fatalf("addresses not distinct: %v", seen)
	}
}
