package intake

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
)

// AdminID is the ledger party of the federation administrator: whoever holds
// the administrator key (admin/admin.key; the CA key in a federation made
// before the two were apart), which signs the genesis and registers parties
// and students.
const AdminID = "federation-admin"

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
