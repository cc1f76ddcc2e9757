package provision

import (
	"fmt"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/intake"
)

// SuspendCommand signs, with the administrator key of the federation in m,
// the ledger command that suspends hospital (suspended true) or reinstates
// it, carrying its next suspension version (1 for the first, one more for
// each after; the ledger names the next one when refusing another).
// `nzc ledger submit` passes it to an auditor.
func SuspendCommand(m *crypto.Manifest, hospital string, suspended bool, version uint64, reason string, now time.Time) ([]byte, error) {
	if _, ok := m.Party(crypto.RoleHospital, hospital); !ok {
		return nil, fmt.Errorf("provision: %s is not a hospital of the federation in %s", hospital, m.Dir)
	}
	if version < 1 {
		return nil, fmt.Errorf("provision: suspension version %d: versions start at 1", version)
	}
	key, err := m.AdminSigningKey()
	if err != nil {
		return nil, fmt.Errorf("signing the suspension of %s: %w", hospital, err)
	}
	return ledger.Sign(&ledger.Suspend{Hospital: hospital, Version: version, Suspended: suspended, Reason: reason, Timestamp: now.UnixNano()}, intake.AdminID, key)
}
