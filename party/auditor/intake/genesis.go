package intake

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
)

// AdminID is the ledger party of the federation administrator: whoever holds
// the administrator key (admin/admin.key; the CA key in a federation made
// before the two were apart), which signs the genesis and registers parties
// and students.
const AdminID = "federation-admin"

// GenesisCommands returns the commands, signed with the administrator key,
// that start a federation's ledger: the genesis naming the administrator,
// the auditors, the aggregator, the hospitals and the students, then one
// registration per student (no answer quota). Hospitals open their own
// accounts later, with commands only they can sign. now is put into the
// commands as their timestamp.
func GenesisCommands(m *crypto.Manifest, adminKey ed25519.PrivateKey, origin string, now time.Time) ([][]byte, error) {
	if len(adminKey) != ed25519.PrivateKeySize {
		return nil, errors.New("intake: the genesis needs the federation administrator's signing key (admin/admin.key)")
	}
	parties, err := Directory(m, adminKey.Public().(ed25519.PublicKey))
	if err != nil {
		return nil, err
	}
	var students []string
	for _, p := range parties {
		if p.Role == ledger.RoleStudent {
			students = append(students, p.ID)
		}
	}
	ts := now.UnixNano()
	g, err := ledger.Sign(&ledger.Genesis{Origin: origin, Parties: parties, Timestamp: ts}, AdminID, adminKey)
	if err != nil {
		return nil, err
	}
	out := [][]byte{g}
	for _, s := range students {
		c, err := ledger.Sign(&ledger.RegisterStudent{Student: s, Timestamp: ts}, AdminID, adminKey)
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
		return nil, fmt.Errorf("intake: %s is not a hospital with a signing key", p.ID)
	}
	pub, err := crypto.LoadPublicKey(m.Path(p.VerifyingKey))
	if err != nil {
		return nil, err
	}
	return ledger.Sign(&ledger.RegisterParty{Party: ledger.Party{ID: p.ID, Role: ledger.RoleHospital, PublicKey: pub}, Timestamp: now.UnixNano()}, AdminID, adminKey)
}

// EnsembleCommands returns the commands, signed with the administrator
// key, that register each given hospital's ensemble: teachers on classes,
// version 1. nzc init puts them in the genesis file after the genesis, and
// nzc init add-hospital next to the registration of a hospital added
// later; the aggregator then takes each hospital's size from the ledger.
func EnsembleCommands(hospitals []string, teachers, classes int, adminKey ed25519.PrivateKey, now time.Time) ([][]byte, error) {
	if teachers < 1 || teachers > ledger.MaxTeachers || classes < 2 || classes > ledger.MaxClasses {
		return nil, fmt.Errorf("intake: an ensemble of %d teachers on %d classes: want 1 to %d teachers and 2 to %d classes", teachers, classes, ledger.MaxTeachers, ledger.MaxClasses)
	}
	var out [][]byte
	for _, h := range hospitals {
		c, err := ledger.Sign(&ledger.RegisterEnsemble{Hospital: h, Version: 1, Teachers: uint64(teachers), Classes: uint64(classes), Timestamp: now.UnixNano()}, AdminID, adminKey)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// GenesisEnsembles returns the ensemble registrations among a genesis
// file's commands, in order (none for a federation made before they
// existed).
func GenesisEnsembles(cmds [][]byte) []*ledger.RegisterEnsemble {
	var out []*ledger.RegisterEnsemble
	for _, b := range cmds {
		if c, err := ledger.DecodeCommand(b); err == nil {
			if e, ok := c.Body.(*ledger.RegisterEnsemble); ok {
				out = append(out, e)
			}
		}
	}
	return out
}

// ReadGenesis reads a genesis file: the commands as a JSON list of base64
// strings, as nzc init writes it (provision.WriteGenesisFile).
func ReadGenesis(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("intake: read genesis: %w", err)
	}
	var cmds [][]byte
	if err := json.Unmarshal(b, &cmds); err != nil {
		return nil, fmt.Errorf("intake: genesis file %s is not a JSON list of commands: %w", path, err)
	}
	return cmds, nil
}

// GenesisDigest returns the digest of a genesis file's first command, the
// genesis itself (ledger.Command.Digest): the value an auditor's
// genesis_hash and verify --genesis-hash pin.
func GenesisDigest(cmds [][]byte) ([32]byte, error) {
	if len(cmds) == 0 {
		return [32]byte{}, errors.New("intake: the genesis file holds no commands; make it again with nzc init")
	}
	c, err := ledger.DecodeCommand(cmds[0])
	if err != nil {
		return [32]byte{}, fmt.Errorf("intake: the genesis file's first command: %w", err)
	}
	if _, ok := c.Body.(*ledger.Genesis); !ok {
		return [32]byte{}, errors.New("intake: the genesis file's first command is not a genesis; make it again with nzc init")
	}
	return c.Digest()
}

// Directory returns the federation's parties as the genesis registers them,
// from public material only: the administrator (admin, the CA's key), and
// every auditor, aggregator, hospital and student of the manifest with its
// signing key (a student, which signs nothing in the ledger, with its
// certificate's key). Sorted by ID. A verifier pins a ledger's parties to it.
func Directory(m *crypto.Manifest, admin ed25519.PublicKey) ([]ledger.Party, error) {
	parties := []ledger.Party{{ID: AdminID, Role: ledger.RoleAdmin, PublicKey: admin}}
	for _, p := range m.Parties {
		var role ledger.Role
		switch p.Role {
		case crypto.RoleAuditor:
			role = ledger.RoleAuditor
		case crypto.RoleAggregator:
			role = ledger.RoleAggregator
		case crypto.RoleHospital:
			role = ledger.RoleHospital
		case crypto.RoleStudent:
			role = ledger.RoleStudent
		default:
			continue
		}
		var pub ed25519.PublicKey
		if p.VerifyingKey != "" {
			k, err := crypto.LoadPublicKey(m.Path(p.VerifyingKey))
			if err != nil {
				return nil, err
			}
			pub = k
		} else {
			// A student signs nothing in the ledger; its certificate key
			// identifies it.
			cert, err := crypto.LoadCert(m.Path(p.Cert))
			if err != nil {
				return nil, err
			}
			k, ok := cert.PublicKey.(ed25519.PublicKey)
			if !ok {
				return nil, fmt.Errorf("intake: the certificate of %s has no ed25519 key", p.ID)
			}
			pub = k
		}
		parties = append(parties, ledger.Party{ID: p.ID, Role: role, PublicKey: pub})
	}
	sort.Slice(parties, func(i, j int) bool { return parties[i].ID < parties[j].ID })
	return parties, nil
}
