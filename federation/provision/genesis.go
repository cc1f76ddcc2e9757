package provision

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/intake"
)

// GenesisCommands returns the commands, signed with the administrator key,
// that start a federation's ledger: the genesis naming the administrator,
// the auditors, the aggregator, the hospitals and the students, and the
// federation's cap bounds (ledger.DefaultEpsilonBound and
// ledger.DefaultDeltaBound), then one registration per student (no answer
// quota). Hospitals open their own accounts later, with commands only they
// can sign. now is put into the commands as their timestamp.
func GenesisCommands(m *crypto.Manifest, adminKey ed25519.PrivateKey, origin string, now time.Time) ([][]byte, error) {
	return BoundedGenesisCommands(m, adminKey, origin, now, ledger.DefaultEpsilonBound, ledger.DefaultDeltaBound, 0)
}

// BoundedGenesisCommands is GenesisCommands with the cap bounds
// epsilonBound (finite, > 0) and deltaBound (in (0, 1)): the ledger refuses
// a hospital's cap above either; and with the share of any hospital's cap
// ε one student may spend, in (0, 1], or 0 for each student's fair share
// (FairShare). The genesis is a genesis-v3 stating the share.
func BoundedGenesisCommands(m *crypto.Manifest, adminKey ed25519.PrivateKey, origin string, now time.Time, epsilonBound, deltaBound, share float64) ([][]byte, error) {
	if !(epsilonBound > 0) || math.IsInf(epsilonBound, 0) || !(deltaBound > 0 && deltaBound < 1) {
		return nil, fmt.Errorf("provision: cap bounds ε=%v δ=%v: give a finite ε > 0 and a δ in (0, 1), e.g. ε 100 and δ 1e-5", epsilonBound, deltaBound)
	}
	if !(share >= 0 && share <= 1) {
		return nil, fmt.Errorf("provision: student share %v: give a share of a hospital's cap in (0, 1], or 0 for each student's fair share", share)
	}
	if len(adminKey) != ed25519.PrivateKeySize {
		return nil, errors.New("provision: the genesis needs the federation administrator's signing key (admin/admin.key)")
	}
	parties, err := intake.Directory(m, adminKey.Public().(ed25519.PublicKey))
	if err != nil {
		return nil, err
	}
	var students []string
	for _, p := range parties {
		if p.Role == ledger.RoleStudent {
			students = append(students, p.ID)
		}
	}
	if share == 0 {
		share = FairShare(len(students))
	}
	ts := now.UnixNano()
	g, err := ledger.Sign(&ledger.Genesis{Origin: origin, Parties: parties, EpsilonBound: epsilonBound, DeltaBound: deltaBound, StudentShare: share,
		Timestamp: ts}, intake.AdminID, adminKey)
	if err != nil {
		return nil, err
	}
	out := [][]byte{g}
	for _, s := range students {
		c, err := ledger.Sign(&ledger.RegisterStudent{Student: s, Timestamp: ts}, intake.AdminID, adminKey)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// RegisterHospital signs, with the administrator key, the command that adds
// a hospital provisioned after the genesis (`nzc init add-hospital`) to the
// ledger. The hospital relays it through the aggregator before opening its
// account; the ledger checks the administrator's signature.
func RegisterHospital(m *crypto.Manifest, p crypto.PartyFiles, adminKey ed25519.PrivateKey, now time.Time) ([]byte, error) {
	if p.Role != crypto.RoleHospital || p.VerifyingKey == "" {
		return nil, fmt.Errorf("provision: %s is not a hospital with a signing key", p.ID)
	}
	pub, err := crypto.LoadPublicKey(m.Path(p.VerifyingKey))
	if err != nil {
		return nil, err
	}
	return ledger.Sign(&ledger.RegisterParty{Party: ledger.Party{ID: p.ID, Role: ledger.RoleHospital, PublicKey: pub}, Timestamp: now.UnixNano()}, intake.AdminID, adminKey)
}

// EnsembleCommands returns the commands, signed with the administrator
// key, that register each given hospital's ensemble: teachers on classes,
// version 1. nzc init puts them in the genesis file after the genesis, and
// nzc init add-hospital next to the registration of a hospital added
// later; the aggregator then takes each hospital's size from the ledger.
func EnsembleCommands(hospitals []string, teachers, classes int, adminKey ed25519.PrivateKey, now time.Time) ([][]byte, error) {
	if teachers < 1 || teachers > ledger.MaxTeachers || classes < 2 || classes > ledger.MaxClasses {
		return nil, fmt.Errorf("provision: an ensemble of %d teachers on %d classes: want 1 to %d teachers and 2 to %d classes", teachers, classes, ledger.MaxTeachers, ledger.MaxClasses)
	}
	var out [][]byte
	for _, h := range hospitals {
		c, err := ledger.Sign(&ledger.RegisterEnsemble{Hospital: h, Version: 1, Teachers: uint64(teachers), Classes: uint64(classes), Timestamp: now.UnixNano()}, intake.AdminID, adminKey)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// FairShare is the default share of any hospital's cap ε one student may
// spend in a federation of n students: 1/n (the whole cap for one
// student), so that no student can take what the others were provisioned
// for.
func FairShare(n int) float64 {
	if n <= 1 {
		return 1
	}
	return 1 / float64(n)
}
