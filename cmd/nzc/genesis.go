package main

import (
	"path/filepath"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/party/auditor/intake"
)

// GenesisFile holds the signed commands that start a federation's ledger.
const GenesisFile = "genesis.json"

// writeGenesis signs, with the administrator's key (not the CA key), the
// commands that start the ledger (every party with its key, and each
// student's registration) and writes them next to the manifest. The first
// auditor applies them.
func writeGenesis(m *crypto.Manifest) error {
	key, err := m.AdminSigningKey()
	if err != nil {
		return err
	}
	cmds, err := intake.GenesisCommands(m, key, "nzc.federation/"+m.CAFingerprint[:8], time.Now())
	if err != nil {
		return err
	}
	return intake.WriteGenesis(filepath.Join(m.Dir, GenesisFile), cmds)
}
