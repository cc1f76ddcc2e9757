package auditor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/party/auditor/dashboard"
	"github.com/nzcfed/nzc/party/auditor/internal/auditortest"
)

// chromium returns Debian's chromium, or skips the test without it —
// unless NZC_REQUIRE_BROWSER=1 (set by CI), where its absence fails.
func chromium(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("NZC_REQUIRE_BROWSER") == "1" {
			t.Fatalf("NZC_REQUIRE_BROWSER=1 but chromium is not installed: run scripts/setup.sh")
		}
		t.Skip("chromium is not installed (scripts/setup.sh installs it)")
	}
	return path
}

// headless runs chromium on url with the given extra flags and returns its
// standard output. The virtual time budget lets the page's script fetch its
// data and render (virtual time stops while requests are in flight).
func headless(t *testing.T, bin, url string, flags ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--hide-scrollbars", "--user-data-dir=" + t.TempDir(),
		"--virtual-time-budget=5000"}, flags...)
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", flags, err, stderr.Bytes())
	}
	return stdout.Bytes()
}

// TestDashboardInBrowser renders the dashboard of a three-auditor cluster
// (mutual TLS on loopback) in headless chromium and checks the page shows
// what the ledger accounted: each hospital's ε and cap, the refusal, the
// cosigners and a passing verification. It keeps a screenshot.
func TestDashboardInBrowser(t *testing.T) {
	bin := chromium(t)
	auditors := []string{"hospital-a", "hospital-b", "regulator"}
	hospitals := []string{"city-general", "north-clinic", "st-marys"}
	c := newTestCluster(t, auditors, func(c *Config) { c.DashboardAddr = "127.0.0.1:0" })
	ledgers := c.ledgers()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	parties := []ledger.Party{ledgerKeys.Party("admin", ledger.RoleAdmin), ledgerKeys.Party("aggregator", ledger.RoleAggregator),
		ledgerKeys.Party("student-1", ledger.RoleStudent)}
	for _, id := range auditors {
		parties = append(parties, ledgerKeys.Party(id, ledger.RoleAuditor))
	}
	for _, id := range hospitals {
		parties = append(parties, ledgerKeys.Party(id, ledger.RoleHospital))
	}
	slices.SortFunc(parties, func(a, b ledger.Party) int { return strings.Compare(a.ID, b.ID) })
	// The entries' stamps, which the charts plot against: the genesis an
	// hour ago, the accounts now (the auditors check an account command's
	// stamp against their clocks), the charges after them at uneven gaps,
	// so that a chart by entry number would not place them as by time.
	ts := time.Now().Add(-time.Hour).UnixNano()
	submit := func(b ledger.Body, signer string) ledger.Result {
		t.Helper()
		return submitTo(ctx, t, c.auds[len(ledgers)-1], b, signer)
	}
	next := func() int64 { ts += int64(7 * time.Minute); return ts }
	must := func(b ledger.Body, signer string) {
		t.Helper()
		if r := submit(b, signer); r.Status != ledger.StatusAccepted {
			t.Fatalf("%s: %s %s", b.Kind(), r.Code, r.Message)
		}
	}
	must(&ledger.Genesis{Origin: "nzc.example/federation", Parties: parties, Timestamp: next()}, "admin")
	for i, h := range hospitals {
		// The auditors check an account command's stamp against their
		// clocks.
		must(&ledger.OpenAccount{Hospital: h, CapEpsilon: float64(int(2) << i), CapDelta: 1e-5, Timestamp: time.Now().UnixNano()}, h)
	}
	ts = time.Now().UnixNano()
	must(&ledger.RegisterStudent{Student: "student-1", Timestamp: next()}, "admin")
	gaps := []time.Duration{7 * time.Minute, 2 * time.Minute, 95 * time.Minute, time.Minute, 40 * time.Minute, 3 * time.Minute, 4 * time.Minute}
	charge := func(batch string, hs []string, answers int, sigma float64) ledger.Result {
		ts += int64(gaps[0])
		gaps = gaps[1:]
		curve := mechanism.Gaussian(mechanism.DefaultGrid(), math.Sqrt2, sigma).Times(answers)
		return submit(&ledger.Charge{BatchID: batch, Student: "student-1", Hospitals: hs, Mechanism: "gnmax",
			Params: mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Classes: 10, Sigma: sigma}.LedgerParams(), Queries: uint64(answers), Answers: uint64(answers),
			Curve: curve.Values(), AnswersHash: sha256.Sum256([]byte(batch)), Timestamp: ts}, "aggregator")
	}
	for i, hs := range [][]string{hospitals, hospitals[1:], hospitals, {hospitals[0], hospitals[2]}, hospitals[2:], hospitals} {
		if r := charge(batchID(i+1), hs, 8, 40); r.Status != ledger.StatusAccepted {
			t.Fatalf("charge %d: %s", i, r.Message)
		}
	}
	refused := charge(batchID(7), hospitals, 400, 40)
	if refused.Code != ledger.CodeCapExceeded {
		t.Fatalf("over-cap charge: %+v", refused)
	}

	size := ledgers[0].State().TreeSize()
	auditortest.WaitFor(t, 10*time.Second, "every auditor to apply and sign the whole log", func() bool {
		for _, l := range ledgers {
			cp, err := l.Checkpoint(0)
			if err != nil {
				return false
			}
			if p, _ := ledger.PeekCheckpoint(cp); p.Size != size || l.State().RootHash() != ledgers[0].State().RootHash() {
				return false
			}
		}
		return true
	})

	st := ledgers[0].State()
	url := "http://" + c.auds[0].Addrs().Dashboard + "/" // the dashboard auditor.New serves, on 127.0.0.1

	// One run renders the page, dumps its DOM and takes the screenshot
	// (chromium's start-up is most of the test's time).
	dir, err := os.MkdirTemp("", "nzc-dashboard-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) }) // NZC_ARTIFACTS keeps a copy
	shot := filepath.Join(dir, "dashboard.png")
	dom := string(headless(t, bin, probed(t, url), "--dump-dom", "--window-size=1400,1700", "--screenshot="+shot))
	has := func(what, pattern string) {
		t.Helper()
		if !regexp.MustCompile(pattern).MatchString(dom) {
			t.Errorf("the rendered page does not show %s (no match for %s)", what, pattern)
		}
	}
	q := regexp.QuoteMeta
	// The figures are the ledger's own accounting, formatted as the page does.
	entries, _ := st.Entries(0, size)
	history, err := ledger.SpendHistory(entries)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range st.Accounts() {
		var last ledger.SpendPoint
		for _, p := range history {
			if p.Hospital == a.Hospital {
				last = p
			}
		}
		if last.Epsilon != a.Epsilon || !(a.Epsilon > 0) {
			t.Fatalf("%s: the history ends at ε %v, the account says %v", a.Hospital, last.Epsilon, a.Epsilon)
		}
		t.Logf("%s: ε %s of cap %s", a.Hospital, dashboard.FormatEpsilon(a.Epsilon), dashboard.FormatEpsilon(a.CapEpsilon))
		has(a.Hospital+"'s ε", `id="eps-`+q(a.Hospital)+`"[^>]*>`+q(dashboard.FormatEpsilon(a.Epsilon))+`<`)
		has(a.Hospital+"'s cap", `id="cap-`+q(a.Hospital)+`"[^>]*>`+q(dashboard.FormatEpsilon(a.CapEpsilon))+`<`)
		has(a.Hospital+"'s chart", `id="account-`+q(a.Hospital)+`"[\s\S]*?<svg[^>]*class="chart"[\s\S]*?<path class="spend"`)
	}
	has("the refusal", fmt.Sprintf(`id="refusal-%d"[\s\S]*?cap-exceeded[\s\S]*?%s`, refused.Index, q(refused.Subject)))
	for _, a := range auditors {
		has(a+" as a cosigner", `data-signed="yes">✓ `+q(a)+`<`)
	}
	has("the cosigned size", `id="cp-signers"[^>]*>3 of 3 auditors`)
	has("the checkpoint's root", `id="cp-root"[^>]*>`+q(st.RootHash().String())+`<`)
	has("a passing verification", `id="verify-badge"[^>]*>verified<`)
	has("the number of entries", `id="entries"[^>]*>`+fmt.Sprint(size)+`<`)
	// The charts plot each point at its entry's stamp on the time axis
	// shared by all hospitals (viewBox 320 wide, 34 left and 8 right for
	// the labels), and say what time that is.
	from, to := history[0].Timestamp, history[0].Timestamp
	for _, p := range history {
		from, to = min(from, p.Timestamp), max(to, p.Timestamp)
	}
	ms := func(ts int64) float64 { return float64(ts / int64(time.Millisecond)) }
	for _, h := range hospitals {
		chart := regexp.MustCompile(`id="account-` + q(h) + `"[\s\S]*?</svg>`).FindString(dom)
		circles := regexp.MustCompile(`<circle cx="([-0-9.e+]+)"[^>]*data-index="(\d+)"`).FindAllStringSubmatch(chart, -1)
		n := 0
		for _, p := range history {
			if p.Hospital != h {
				continue
			}
			want := 34 + 278*(ms(p.Timestamp)-ms(from))/(ms(to)-ms(from))
			i := slices.IndexFunc(circles, func(c []string) bool { return c[2] == fmt.Sprint(p.Index) })
			if i < 0 {
				t.Errorf("%s: no point for entry %d", h, p.Index)
				continue
			}
			if got, err := strconv.ParseFloat(circles[i][1], 64); err != nil || math.Abs(got-want) > 0.01 {
				t.Errorf("%s: entry %d (stamped %s) drawn at x=%s, want %.2f: its time on the axis", h, p.Index, time.Unix(0, p.Timestamp).UTC(), circles[i][1], want)
			}
			n++
		}
		if n != len(circles) || n == 0 {
			t.Errorf("%s: %d points drawn, %d in the history", h, len(circles), n)
		}
		has(h+"'s time axis", `id="account-`+q(h)+`"[\s\S]*?class="axis-label"[^>]*>[^<]*UTC, proposer's clock<`)
	}
	// At 1,400 px every list fits its panel: nothing sticks out, and
	// nothing needs its scroll bar.
	has("the probe's measures", `id="probe"`)
	for _, list := range regexp.MustCompile(`(charges|refusals) (\w+) (\d+) (\d+)`).FindAllStringSubmatch(dom, -1) {
		if list[2] != "fits" {
			t.Errorf("the %s table %s at 1,400 px: its right edge at %s px, its panel's content ends at %s px", list[1], list[2], list[3], list[4])
		}
	}
	if strings.Contains(dom, "Could not load") {
		t.Errorf("the page reports a load error")
	}
	if t.Failed() {
		t.Logf("rendered DOM:\n%s", dom)
	}

	png, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("no screenshot at %s: %v", shot, err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
	if art := os.Getenv("NZC_ARTIFACTS"); art != "" {
		if err := os.MkdirAll(art, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(art, "dashboard.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot copied to %s", filepath.Join(art, "dashboard.png"))
	}
}

// batchID is the i-th batch's id as the aggregator writes it: the hex of a
// 32-byte id.
func batchID(i int) string {
	id := sha256.Sum256([]byte(fmt.Sprint("batch-", i)))
	return hex.EncodeToString(id[:])
}

// probeJS measures, once the page has drawn its charges, whether each list
// table fits its panel, and writes the result into the page as
// "<tbody id> fits|scrolls|overflows <table's right edge> <panel content's right edge>".
const probeJS = `(function () {
  function check() {
    if (!document.querySelector("#charges tr[id^='charge-']") || !document.querySelector("#refusals tr[id^='refusal-']")) {
      setTimeout(check, 50);
      return;
    }
    const out = [];
    for (const t of document.querySelectorAll("table.list")) {
      const panel = t.closest(".panel");
      const right = panel.getBoundingClientRect().right - parseFloat(getComputedStyle(panel).paddingRight);
      const edge = t.getBoundingClientRect().right;
      const box = t.parentElement;
      const state = box.scrollWidth > box.clientWidth + 0.5 && getComputedStyle(box).overflowX !== "visible" ? "scrolls"
        : edge > right + 0.5 ? "overflows" : "fits";
      out.push(t.querySelector("tbody").id + " " + state + " " + Math.round(edge) + " " + Math.round(right));
    }
    const pre = document.createElement("pre");
    pre.id = "probe";
    pre.textContent = out.join("\n");
    document.body.append(pre);
  }
  check();
})();
`

// probed serves the dashboard at target through a proxy that adds
// probeJS to its page, and returns the proxy's URL.
func probed(t *testing.T, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(u)
		r.Out.Header.Del("Accept-Encoding")
	}}
	proxy.ModifyResponse = func(resp *http.Response) error {
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if !bytes.Contains(body, []byte("</body>")) {
			return fmt.Errorf("the page has no </body> to add the probe before")
		}
		body = bytes.Replace(body, []byte("</body>"), []byte(`<script src="/probe.js"></script></body>`), 1)
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", fmt.Sprint(len(body)))
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/probe.js", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		_, _ = io.WriteString(w, probeJS)
	})
	mux.Handle("/", proxy)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/"
}
