package ops

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestEndpoints(t *testing.T) {
	reg := NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "nzc_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	var ready atomic.Bool
	h := Handler(reg, func() (bool, string) {
		if ready.Load() {
			return true, "ready"
		}
		return false, "waiting for 2 of 3 hospitals"
	})
	for _, tc := range []struct {
		path string
		code int
		want string
	}{
		{"/livez", 200, "ok"},
		{"/readyz", 503, "waiting for 2 of 3 hospitals"},
		{"/metrics", 200, "nzc_test_total 3"},
		{"/nope", 404, ""},
	} {
		code, body := get(t, h, tc.path)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %q, want %d containing %q", tc.path, code, body, tc.code, tc.want)
		}
	}
	ready.Store(true)
	if code, _ := get(t, h, "/readyz"); code != 200 {
		t.Fatalf("/readyz after ready: %d", code)
	}
}

func TestServeStopsWithContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- ServeListener(ctx, ln, Handler(NewRegistry(), nil), slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	resp, err := http.Get("http://" + ln.Addr().String() + "/livez")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve returned %v after cancel", err)
	}
}

// Every HTTP server gets all four timeouts: before, only the header
// timeout was set, so a client could hold a connection open, idle or
// mid-request, for ever.
func TestNewServerHasEveryTimeout(t *testing.T) {
	s := NewServer(http.NotFoundHandler())
	for name, d := range map[string]time.Duration{"ReadHeaderTimeout": s.ReadHeaderTimeout, "ReadTimeout": s.ReadTimeout,
		"WriteTimeout": s.WriteTimeout, "IdleTimeout": s.IdleTimeout} {
		if d <= 0 {
			t.Errorf("%s is %v", name, d)
		}
	}
	if s.ReadTimeout < s.ReadHeaderTimeout {
		t.Errorf("ReadTimeout %v is shorter than ReadHeaderTimeout %v", s.ReadTimeout, s.ReadHeaderTimeout)
	}
}
