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
// commands that start the ledger (every party with its key, each
// student's registration, and, when teachers is not 0, each founding
// hospital's ensemble: teachers on classes) and writes them next to the
// manifest. The first auditor applies them.
func writeGenesis(m *crypto.Manifest, teachers, classes int) error {
	key, err := m.AdminSigningKey()
	if err != nil {
		return err
	}
	now := time.Now()
	cmds, err := intake.GenesisCommands(m, key, "nzc.federation/"+m.CAFingerprint[:8], now)
	if err != nil {
		return err
	}
	if teachers == 0 {
		return intake.WriteGenesis(filepath.Join(m.Dir, GenesisFile), cmds)
	}
	var hospitals []string
	for _, h := range m.ByRole(crypto.RoleHospital) {
		hospitals = append(hospitals, h.ID)
	}
	ens, err := intake.EnsembleCommands(hospitals, teachers, classes, key, now)
	if err != nil {
		return err
	}
	return intake.WriteGenesis(filepath.Join(m.Dir, GenesisFile), append(cmds, ens...))
}
