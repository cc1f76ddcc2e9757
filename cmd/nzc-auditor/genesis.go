package main

import (
	"github.com/nzcfed/nzc/federation/config"
	"github.com/nzcfed/nzc/party/auditor"
	"github.com/nzcfed/nzc/party/auditor/intake"
)

// loadGenesis sets the genesis this auditor applies to an empty ledger and
// the genesis digest it pins, from the configuration.
func loadGenesis(cfg config.Auditor, ac *auditor.Config) error {
	var err error
	if ac.GenesisHash, err = cfg.PinnedGenesis(); err != nil {
		return err
	}
	if cfg.Genesis == "" {
		return nil
	}
	ac.Genesis, err = intake.ReadGenesis(cfg.Genesis)
	return err
}
