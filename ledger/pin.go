package ledger

import (
	"bytes"
	"fmt"
	"slices"
)

// CheckFederation names the check that the federation was pinned from
// outside the log.
const CheckFederation = "federation"

// pinFederation checks the log's parties against the federation directory
// the verifier holds: the genesis was signed by an administrator of the
// directory with its key, the genesis is the one pinned by hash, and every
// party the log registered is in the directory with the same role and key.
// Auditor keys alone do not stop a fabricated federation: a log that names a
// made-up administrator, aggregator and hospitals can still carry the real
// auditors' signatures. g is the log's first accepted genesis among the
// entries replay reproduced, nil if none.
func (r *Report) pinFederation(st *State, g *foundGenesis, opts VerifyOptions) {
	if len(opts.Directory) == 0 && len(opts.GenesisHash) == 0 {
		const what = "the federation is UNPINNED: its parties are taken from the log itself and its auditor keys from what was given, which a fabricated federation supplies as easily as the real one"
		if opts.Unpinned {
			r.add(Check{Name: CheckFederation, OK: true, Detail: what + " (accepted as asked); pin it with the federation directory (verify --federation) or the genesis hash (verify --genesis-hash) to detect a fabricated administrator, aggregator, hospital or auditor"})
		} else {
			r.add(Check{Name: CheckFederation, Detail: what + "; pin it with verify --federation DIR or --genesis-hash HEX (the auditors' genesis_hash), or accept an unpinned check with --unpinned"})
		}
		return
	}
	if g == nil {
		r.add(Check{Name: "genesis", Detail: "no accepted genesis to pin"})
		return
	}
	genesisCmd, signer, at := g.cmd, g.cmd.Signer, g.at
	if len(opts.GenesisHash) > 0 {
		h, _ := genesisCmd.Digest()
		if !bytes.Equal(h[:], opts.GenesisHash) {
			r.add(Check{Name: "genesis", Entry: entryRef(at), Detail: fmt.Sprintf("the genesis hashes to %x, not the pinned %x", h, opts.GenesisHash)})
		} else {
			r.add(Check{Name: "genesis", OK: true, Entry: entryRef(at), Detail: "the genesis is the pinned one"})
		}
	}
	if len(opts.Directory) == 0 {
		return
	}
	dir := map[string]Party{}
	for _, p := range opts.Directory {
		dir[p.ID] = p
	}
	logParties := st.Parties()
	logKey := map[string]Party{}
	for _, p := range logParties {
		logKey[p.ID] = p
	}
	if d, ok := dir[signer]; !ok || d.Role != RoleAdmin || !slices.Equal(d.PublicKey, logKey[signer].PublicKey) {
		r.add(Check{Name: "genesis signer", Entry: entryRef(at), Detail: fmt.Sprintf("the genesis is signed by %s, which is not the federation's administrator with its key", signer)})
	} else {
		r.add(Check{Name: "genesis signer", OK: true, Entry: entryRef(at), Detail: fmt.Sprintf("the genesis is signed by the federation's administrator %s", signer)})
	}
	bad := 0
	for _, p := range logParties {
		d, ok := dir[p.ID]
		switch {
		case !ok:
			r.add(Check{Name: "party", Detail: fmt.Sprintf("the log registers %s %s, which the federation directory does not hold", p.Role, p.ID)})
			bad++
		case d.Role != p.Role || !slices.Equal(d.PublicKey, p.PublicKey):
			r.add(Check{Name: "party", Detail: fmt.Sprintf("the log registers %s %s with another role or key than the federation directory", p.Role, p.ID)})
			bad++
		}
	}
	if bad == 0 {
		r.add(Check{Name: "parties", OK: true, Detail: fmt.Sprintf("all %d parties of the log are the federation directory's, with its keys", len(logParties))})
	}
}

// foundGenesis is the first accepted genesis of a log, and its entry.
type foundGenesis struct {
	cmd Command
	at  int64
}
