// Package dashboard serves an auditor's web dashboard of the privacy ledger:
// every hospital's ε spent against its cap over time, recent charges and
// refusals, the latest checkpoint and who cosigned it, and the result of a
// live verification of the log (a full replay and the checkpoint's
// signatures, by ledger.Verify).
//
// The page and its assets are embedded in the binary and fetch nothing from
// elsewhere; the page's script draws the charts as inline SVG from the JSON
// endpoints under /api/. The handler only reads: it has no method that
// changes anything.
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/nzcfed/nzc/ledger"
)

// Source is what the dashboard reads. *ledger.State provides every method
// but CosignedCheckpoint; LedgerSource adds that one.
type Source interface {
	// Accounts returns every hospital's budget account.
	Accounts() []ledger.Account
	// TreeSize returns the number of entries in the log.
	TreeSize() int64
	// Entries returns the encoded entries [from, to).
	Entries(from, to int64) ([][]byte, error)
	// AuditorKeys returns the verifier keys of the auditors registered in
	// the first size entries.
	AuditorKeys(size int64) ([]string, error)
	// CosignedCheckpoint returns the latest signed checkpoint with the
	// signatures of every auditor that answered before ctx ended. With
	// fewer than a majority it returns the partly signed checkpoint and an
	// error.
	CosignedCheckpoint(ctx context.Context) ([]byte, error)
}

// LedgerSource is a Source over a ledger state and a function that gathers
// the auditors' signatures on its latest checkpoint (an auditor node's
// CosignCheckpoint).
func LedgerSource(st *ledger.State, cosign func(context.Context) ([]byte, error)) Source {
	return ledgerSource{st, cosign}
}

type ledgerSource struct {
	*ledger.State
	cosign func(context.Context) ([]byte, error)
}

func (s ledgerSource) CosignedCheckpoint(ctx context.Context) ([]byte, error) { return s.cosign(ctx) }

// Options configure the dashboard. The zero value works.
type Options struct {
	// Auditor is this auditor's ID, shown in the page's header.
	Auditor string
	// TrustedKeys are the auditors' verifier keys as known from outside the
	// log. When empty, the live verification takes the keys from the log's
	// own genesis and registrations, and says so.
	TrustedKeys []string
	// Recent is how many charges and refusals are listed (default 20).
	Recent int
	// SVTMinAnswers is the aggregator's svt_min_answers: an nzc-svt
	// session that refuses its K queries having answered fewer is shown
	// as burnt. 0: the session's K, the aggregator's default.
	SVTMinAnswers int
	// Refresh is how long the page's data is reused before the log is read
	// again (default 2s). Reading replays the log, so it is rate-limited.
	Refresh time.Duration
	// VerifyEvery is the least time between two live verifications
	// (default 30s): each replays the whole log and checks its signatures.
	VerifyEvery time.Duration
	// CosignTimeout bounds gathering the other auditors' signatures on the
	// latest checkpoint (default 3s).
	CosignTimeout time.Duration
	// MaxPoints bounds the points of each hospital's chart (default 400);
	// longer series are thinned, keeping every cap change and the latest.
	MaxPoints int
	// Members returns the auditor ids of this auditor's raft membership.
	// When set, the checkpoint view compares them with the auditors the
	// ledger registers and names each difference; nil compares nothing.
	Members func() ([]string, error)
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives failures to read the log (default: discarded).
	Logger *slog.Logger
}

func (o *Options) defaults() {
	if o.Recent <= 0 {
		o.Recent = 20
	}
	if o.Refresh <= 0 {
		o.Refresh = 2 * time.Second
	}
	if o.VerifyEvery <= 0 {
		o.VerifyEvery = 30 * time.Second
	}
	if o.CosignTimeout <= 0 {
		o.CosignTimeout = 3 * time.Second
	}
	if o.MaxPoints < 2 {
		o.MaxPoints = 400
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

//go:embed assets
var assets embed.FS

// Dashboard is the http.Handler of the dashboard.
type Dashboard struct {
	src  Source
	opts Options
	mux  *http.ServeMux
	data cache
	ver  verifier
}

// New returns the dashboard over src.
func New(src Source, opts Options) (*Dashboard, error) {
	if src == nil {
		return nil, errors.New("dashboard: New needs a source")
	}
	opts.defaults()
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	d := &Dashboard{src: src, opts: opts, mux: http.NewServeMux()}
	files := http.FileServerFS(static)
	d.mux.Handle("GET /{$}", files)
	d.mux.Handle("GET /assets/", http.StripPrefix("/assets", files))
	d.mux.HandleFunc("GET /api/overview", d.serveView(func(v *view) any { return v.overview }))
	d.mux.HandleFunc("GET /api/history", d.serveView(func(v *view) any { return v.history }))
	d.mux.HandleFunc("GET /api/activity", d.serveView(func(v *view) any { return v.activity }))
	d.mux.HandleFunc("GET /api/checkpoint", d.serveView(func(v *view) any { return v.checkpoint }))
	d.mux.HandleFunc("GET /api/verification", d.serveView(func(v *view) any { return d.verification(v) }))
	return d, nil
}

// ServeHTTP serves the page, its assets and its JSON. It answers only
// requests whose Host is an IP address or localhost (see allowedHost) and
// sets headers that keep the page from loading anything from elsewhere or
// being framed.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !allowedHost(r.Host) {
		http.Error(w, "dashboard: unexpected Host header; open the dashboard by IP address or localhost", http.StatusMisdirectedRequest)
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	d.mux.ServeHTTP(w, r)
}

// allowedHost accepts a Host that is an IP literal or localhost (with any
// port). A web page the operator visits elsewhere could otherwise point a
// DNS name of its own at 127.0.0.1 and read the dashboard through the
// operator's browser (DNS rebinding); such a request carries that name as
// its Host and is refused.
func allowedHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.EqualFold(host, "localhost") || net.ParseIP(host) != nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	_ = enc.Encode(v)
}

func (d *Dashboard) current(w http.ResponseWriter, r *http.Request) (*view, bool) {
	v, err := d.view(r.Context())
	if err != nil {
		d.opts.Logger.Warn("dashboard: reading the ledger failed", "err", err)
		http.Error(w, "dashboard: "+err.Error(), http.StatusServiceUnavailable)
		return nil, false
	}
	return v, true
}

// serveView answers with the part of the current view that pick selects.
func (d *Dashboard) serveView(pick func(*view) any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if v, ok := d.current(w, r); ok {
			writeJSON(w, pick(v))
		}
	}
}
