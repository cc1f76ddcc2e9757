package auditor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
	ts := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC).UnixNano()
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
	must(&ledger.RegisterStudent{Student: "student-1", Timestamp: next()}, "admin")
	charge := func(batch string, hs []string, answers int, sigma float64) ledger.Result {
		curve := mechanism.Gaussian(mechanism.DefaultGrid(), math.Sqrt2, sigma).Times(answers)
		return submit(&ledger.Charge{BatchID: batch, Student: "student-1", Hospitals: hs, Mechanism: "gnmax",
			Params: mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Classes: 10, Sigma: sigma}.LedgerParams(), Queries: uint64(answers), Answers: uint64(answers),
			Curve: curve.Values(), AnswersHash: sha256.Sum256([]byte(batch)), Timestamp: next()}, "aggregator")
	}
	for i, hs := range [][]string{hospitals, hospitals[1:], hospitals, {hospitals[0], hospitals[2]}, hospitals[2:], hospitals} {
		if r := charge(fmt.Sprintf("batch-%03d", i+1), hs, 8, 40); r.Status != ledger.StatusAccepted {
			t.Fatalf("charge %d: %s", i, r.Message)
		}
	}
	refused := charge("batch-007", hospitals, 400, 40)
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
	dom := string(headless(t, bin, url, "--dump-dom", "--window-size=1280,1700", "--screenshot="+shot))
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
