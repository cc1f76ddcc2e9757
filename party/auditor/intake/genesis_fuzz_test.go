package intake

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nzcfed/nzc/ledger"
)

// FuzzReadGenesis feeds arbitrary genesis files to what an auditor does
// with one: read the list of commands and apply each to an empty ledger.
// Whatever the file holds, reading fails with an error or the commands
// apply, and the ledger they leave replays to the same tree: a hostile
// genesis may be refused, never fork the log.
func FuzzReadGenesis(f *testing.F) {
	_, cmds := provisionedGenesis(f, "nzc.test/genesis", time.Unix(1_700_000_000, 0))
	good, _ := json.Marshal(cmds)
	f.Add(good)
	f.Add([]byte(`[]`))
	f.Add([]byte(`["AAAA", null, ""]`))
	f.Add([]byte(`{"commands": []}`))
	if len(cmds) > 1 {
		twice, _ := json.Marshal([][]byte{cmds[0], cmds[0], cmds[1]})
		f.Add(twice)
	}
	path := filepath.Join(f.TempDir(), "genesis.json") // rewritten for each input
	f.Fuzz(func(t *testing.T, file []byte) {
		if err := os.WriteFile(path, file, 0o600); err != nil {
			t.Fatal(err)
		}
		cmds, err := ReadGenesis(path)
		if err != nil {
			return
		}
		st := ledger.New()
		for _, c := range cmds {
			if _, err := st.Apply(c); err != nil && len(c) <= ledger.MaxCommandSize {
				t.Fatalf("applying a genesis command of %d bytes: %v", len(c), err)
			}
		}
		entries, err := st.Entries(0, st.TreeSize())
		if err != nil {
			t.Fatal(err)
		}
		again, err := ledger.Replay(entries)
		if err != nil {
			t.Fatalf("the ledger a genesis file left does not replay: %v", err)
		}
		if again.RootHash() != st.RootHash() || len(again.Accounts()) != len(st.Accounts()) || len(again.Parties()) != len(st.Parties()) {
			t.Fatal("the replay differs from the ledger it replays")
		}
	})
}
