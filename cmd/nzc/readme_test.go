package main

import (
	"bufio"
	"crypto/ed25519"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/crypto/cryptotest"
	"github.com/nzcfed/nzc/federation/proctest"
	"github.com/nzcfed/nzc/federation/provision"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/intake"
)

// readmeCommands returns README's shell lines that begin with prefix,
// continuation lines joined.
func readmeCommands(t *testing.T, prefix string) []string {
	t.Helper()
	f, err := os.Open("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	var cur string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case cur != "":
			cur += "\n" + line
		case strings.HasPrefix(line, prefix):
			cur = line
		default:
			continue
		}
		if !strings.HasSuffix(line, `\`) {
			out = append(out, cur)
			cur = ""
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// README's `nzc ledger verify` examples work as written, in a directory
// holding what they name: a federation made by nzc init, its ledger's
// export, the auditors' keys and a checkpoint kept from an earlier audit.
func TestReadmeVerifyExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("builds nzc and runs README's lines in a shell")
	}
	cmds := readmeCommands(t, "nzc ledger verify ")
	if len(cmds) < 2 {
		t.Fatalf("README has %d nzc ledger verify examples, want at least 2", len(cmds))
	}
	bin := proctest.Build(t, "github.com/nzcfed/nzc/cmd/nzc")
	work := t.TempDir()
	t.Chdir(work)
	if out, err := runNZC(t, "init", "--dir", "federation", "--hospitals", "2", "--auditors", "3", "--students", "1"); err != nil {
		t.Fatalf("nzc init: %v\n%s", err, out)
	}
	m, err := crypto.LoadManifest("federation")
	if err != nil {
		t.Fatal(err)
	}
	genesis, err := intake.ReadGenesis(filepath.Join("federation", provision.GenesisFile))
	if err != nil {
		t.Fatal(err)
	}
	st := ledger.New()
	for _, cmd := range genesis {
		if r, err := st.Apply(cmd); err != nil || r.Status != ledger.StatusAccepted {
			t.Fatalf("the genesis: %+v %v", r, err)
		}
	}
	auditors := m.ByRole(crypto.RoleAuditor)
	now := time.Now().Unix()
	cosign := func() []byte {
		root, err := st.TreeHash(st.TreeSize())
		if err != nil {
			t.Fatal(err)
		}
		var signers []note.Signer
		for _, a := range auditors {
			s, err := ledger.NewCheckpointSigner(a.ID, cryptotest.SigningKey(t, m, a), now)
			if err != nil {
				t.Fatal(err)
			}
			signers = append(signers, s)
		}
		b, err := ledger.SignCheckpoint(ledger.Checkpoint{Origin: st.Origin(), Size: st.TreeSize(), Root: root}, signers...)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	earlier := cosign()
	if _, err := st.Apply([]byte("a refused command grows the log")); err != nil {
		t.Fatal(err)
	}
	export, err := st.Export([][]byte{cosign()})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, a := range auditors {
		pub, err := crypto.LoadPublicKey(m.Path(a.VerifyingKey))
		if err != nil {
			t.Fatal(err)
		}
		k, err := ledger.VerifierKey(a.ID, ed25519.PublicKey(pub))
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	for name, b := range map[string][]byte{"ledger.export": export, "last-audit.checkpoint": earlier, "auditors.keys": []byte(strings.Join(keys, "\n") + "\n")} {
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, line := range cmds {
		sh := exec.Command("sh", "-c", line)
		sh.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"), "NZC_CHECKPOINTS="+t.TempDir())
		out, err := sh.CombinedOutput()
		verified := strings.Contains(string(out), "VERIFIED: ") || strings.Contains(string(out), `"federation_pinned": true`)
		if err != nil || !verified {
			t.Fatalf("README's\n%s\nfailed: %v\n%s", line, err, out)
		}
	}
}
