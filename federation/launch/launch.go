// Package launch assembles a whole federation on this machine. It
// provisions the federation in a directory through federation/provision
// (as `nzc init` does) and then runs its parties in one of two modes:
//
//   - as processes (Processes): it builds the party binaries and starts,
//     stops, kills and restarts them, each with its own log and extra
//     environment (pause.At stops one at a named point); `nzc demo`
//     and the process-level fault tests run this way;
//   - in this process (Group, StartAuditors, StartAggregator,
//     StartHospitals): the same parties without processes, for `nzc bench`
//     and the end-to-end tests.
//
// Either way it waits for the parties through their operations endpoints
// (/readyz, /metrics) and the auditors' compliance API, and verifies the
// ledger's export against the auditors' keys from the federation directory.
package launch

import (
	"bufio"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/provision"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/compliance"
	"github.com/nzcfed/nzc/party/auditor/intake"
)

// Federation is a provisioned federation: its manifest and CA.
type Federation struct {
	M  *crypto.Manifest
	CA *x509.Certificate
	// Genesis is the genesis file (a JSON list of commands) StartAuditors
	// applied; before, StartHospitals reads the federation's genesis.json
	// if there is one.
	Genesis []byte
}

// Provision makes a federation in dir (CA, every party's certificate and
// keys, the manifest).
func Provision(dir string, spec provision.Spec) (*Federation, error) {
	m, err := provision.Provision(dir, spec)
	if err != nil {
		return nil, err
	}
	return Open(m)
}

// Open returns the federation of a manifest.
func Open(m *crypto.Manifest) (*Federation, error) {
	ca, err := crypto.LoadCert(m.Path(m.CACert))
	if err != nil {
		return nil, fmt.Errorf("federation CA: %w", err)
	}
	return &Federation{M: m, CA: ca}, nil
}

// Compliance returns a client of the compliance API at addr presenting the
// compliance party's certificate.
func (f *Federation) Compliance(addr string) (*compliance.Client, error) {
	return compliance.NewClientAs(addr, f.M, string(crypto.RoleCompliance))
}

// AuditorKeys returns the note verifier keys of the federation's auditors,
// from their public keys in the federation directory: the keys a verifier
// trusts, from outside any export.
func (f *Federation) AuditorKeys() ([]string, error) { return compliance.AuditorKeys(f.M) }

// Verify verifies a ledger export as a compliance officer holding the
// federation directory does: against the auditors' keys, with the genesis
// signer and every party pinned to the directory.
func (f *Federation) Verify(export []byte) (*ledger.Report, error) {
	keys, err := f.AuditorKeys()
	if err != nil {
		return nil, err
	}
	dir, err := directory(f.M)
	if err != nil {
		return nil, err
	}
	return ledger.Verify(export, ledger.VerifyOptions{TrustedKeys: keys, Directory: dir}), nil
}

// Directory returns the parties of the federation directory dir as its
// genesis registers them, with the administrator's public key: what a
// verifier pins the log's genesis signer and parties to.
func Directory(dir string) ([]ledger.Party, error) {
	m, err := crypto.LoadManifest(dir)
	if err != nil {
		return nil, err
	}
	return directory(m)
}

func directory(m *crypto.Manifest) ([]ledger.Party, error) {
	admin, err := m.AdminPublicKey()
	if err != nil {
		return nil, err
	}
	return intake.Directory(m, admin)
}

// ErrTimeout is returned by Poll when the condition did not hold in time.
var ErrTimeout = errors.New("condition not met in time")

// Poll calls cond every interval until it returns true, ctx ends, or within
// passes (ErrTimeout).
func Poll(ctx context.Context, within, interval time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return ErrTimeout
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// Get fetches a plain-HTTP operations URL (/livez, /readyz, /metrics,
// /status) and returns its status code and body.
func Get(ctx context.Context, url string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// Ready asks a party's /readyz at the operations address addr: whether it
// is ready, and what it waits for.
func Ready(ctx context.Context, addr string) (bool, string) {
	code, b, err := Get(ctx, "http://"+addr+"/readyz")
	if err != nil {
		return false, "starting"
	}
	return code == http.StatusOK, strings.TrimSpace(string(b))
}

// Metric reads the value of an unlabelled metric from the /metrics of the
// operations address addr (-1 when absent or unreachable).
func Metric(ctx context.Context, addr, name string) float64 {
	_, b, err := Get(ctx, "http://"+addr+"/metrics")
	if err != nil {
		return -1
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			if x, err := strconv.ParseFloat(v, 64); err == nil {
				return x
			}
		}
	}
	return -1
}

// Charge is an accepted charge and the index of its entry.
type Charge struct {
	Index uint64
	*ledger.Charge
}

// Charges decodes encoded ledger entries and returns them with the
// accepted charges among them, by batch id (a batch charged twice has two).
func Charges(raw [][]byte) ([]ledger.Entry, map[string][]Charge, error) {
	entries := make([]ledger.Entry, 0, len(raw))
	charges := map[string][]Charge{}
	for _, b := range raw {
		e, err := ledger.DecodeEntry(b)
		if err != nil {
			return nil, nil, err
		}
		entries = append(entries, e)
		if e.Status != ledger.StatusAccepted {
			continue
		}
		c, err := ledger.DecodeCommand(e.Command)
		if err != nil {
			return nil, nil, fmt.Errorf("accepted entry %d: %w", e.Index, err)
		}
		if ch, ok := c.Body.(*ledger.Charge); ok {
			charges[ch.BatchID] = append(charges[ch.BatchID], Charge{e.Index, ch})
		}
	}
	return entries, charges, nil
}

// WaitFederation waits, at most within, until the aggregator at the
// operations address aggOps has all the hospitals connected and the ledger,
// read through api, has their budget accounts open. progress (when not nil)
// hears each change of what it waits for.
func WaitFederation(ctx context.Context, within time.Duration, aggOps string, api *compliance.Client, hospitals int, progress func(string)) error {
	last := ""
	err := Poll(ctx, within, 250*time.Millisecond, func() bool {
		_, reason := Ready(ctx, aggOps)
		connected := int(Metric(ctx, aggOps, "nzc_aggregator_hospitals_connected"))
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		accounts, _ := api.Accounts(actx)
		cancel()
		s := fmt.Sprintf("aggregator: %s; ledger: %d of %d budget accounts open", reason, len(accounts), hospitals)
		if connected == hospitals && len(accounts) == hospitals {
			s = fmt.Sprintf("aggregator %s; %d budget accounts open in the ledger", reason, len(accounts))
		}
		if s != last && progress != nil {
			progress(s)
		}
		last = s
		return connected == hospitals && len(accounts) == hospitals
	})
	if err != nil {
		return fmt.Errorf("the federation did not become ready (%s): %w", last, err)
	}
	return nil
}
