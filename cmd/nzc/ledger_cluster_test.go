package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

func TestLedgerPeersAndEntries(t *testing.T) {
	f := newLedgerFixture(t)
	st := f.log(t, 0)
	addr, _, _ := f.complianceAPI(t, st, 3)
	api := []string{"--api", addr, "--federation", f.dir}

	text, err := runNZC(t, append([]string{"ledger", "peers"}, api...)...)
	if err != nil || !strings.Contains(text, "auditor-1 at 127.0.0.1:7500 (leader)") || !strings.Contains(text, "key auditor-2+") {
		t.Fatalf("peers: %v\n%s", err, text)
	}
	text, err = runNZC(t, append([]string{"ledger", "peers", "--as", "hospital-2"}, api...)...)
	if err != nil || strings.Contains(text, "key ") {
		t.Fatalf("peers for a hospital: %v\n%s", err, text)
	}

	text, err = runNZC(t, append([]string{"ledger", "entries"}, api...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	for _, want := range []string{"     0  accepted   genesis          by federation-admin", "open-account     by hospital-1", "cap ε=8 δ=1e-05", "register-student", "4 entries listed; the log has 4"} {
		if !strings.Contains(text, want) {
			t.Fatalf("entries lack %q:\n%s", want, text)
		}
	}
	text, err = runNZC(t, append([]string{"ledger", "entries", "--start", "1", "--limit", "2", "--format", "json"}, api...)...)
	var out entriesOutput
	if err != nil || json.Unmarshal([]byte(text), &out) != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	raw, _ := st.Entries(1, 3)
	if len(out.Entries) != 2 || out.Next == nil || *out.Next != 3 || string(out.Entries[0].Raw) != string(raw[0]) || out.Entries[1].Index != 2 {
		t.Fatalf("entries 1–2: %+v", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"entries", "--as", "hospital-1"}, "403 Forbidden: nzc://hospital/hospital-1 may not read /v1/entries"},
		{[]string{"entries", "--as", "aggregator"}, "only the compliance, hospital, student and auditor roles may"},
		{[]string{"entries", "--start", "9"}, "400 Bad Request: parameter start=9 is out of range"},
		{[]string{"entries", "--limit", "0"}, "--limit ≥ 1"},
		{[]string{"export", "--as", "hospital-1", "--out", filepath.Join(t.TempDir(), "x")}, "only the compliance and auditor roles may"},
		{[]string{"entries", "--as", "student-1"}, "only the compliance and auditor roles may"},
	} {
		text, err := runNZC(t, append(append([]string{"ledger"}, tc.args...), api...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%v: %v, want %q\n%s", tc.args, err, tc.want, text)
		}
	}
}

func TestLedgerJoinAndRemove(t *testing.T) {
	f := newLedgerFixture(t)
	addr, cluster, _ := f.complianceAPI(t, f.log(t, 0), 3)
	api := []string{"--api", addr, "--federation", f.dir}
	// An auditor's operator changes only its own auditor's membership.
	text, err := runNZC(t, append([]string{"ledger", "join", "--as", "auditor-1", "--id", "auditor-1", "--addr", "127.0.0.1:7501"}, api...)...)
	if err != nil || !strings.Contains(text, "auditor auditor-1 at 127.0.0.1:7501 is a member") {
		t.Fatalf("join: %v\n%s", err, text)
	}
	text, err = runNZC(t, append([]string{"ledger", "remove-peer", "--as", "auditor-1", "--id", "auditor-1", "--format", "json"}, api...)...)
	var s raftnode.Status
	if err != nil || json.Unmarshal([]byte(text), &s) != nil || s.LeaderID != "auditor-1" {
		t.Fatalf("remove-peer: %v\n%s", err, text)
	}
	if !slices.Equal(cluster.joined, []string{"auditor-1=127.0.0.1:7501"}) || !slices.Equal(cluster.removed, []string{"auditor-1"}) {
		t.Fatalf("the cluster saw joins %v, removals %v", cluster.joined, cluster.removed)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"join", "--id", "auditor-4", "--addr", "127.0.0.1:7503"}, "--as ID is required"},
		// auditor-2's certificate is for auditor-2's API: the client
		// refuses another auditor's server before sending anything (the
		// server's own refusal is tested in package compliance).
		{[]string{"join", "--as", "auditor-2", "--id", "auditor-4", "--addr", "127.0.0.1:7503"}, "the server is nzc://auditor/auditor-1, not auditor auditor-2"},
		{[]string{"join", "--as", "compliance", "--id", "auditor-4", "--addr", "127.0.0.1:7503"}, "may not administer auditor auditor-1"},
		{[]string{"join", "--as", "auditor-1", "--id", "auditor-4"}, "--addr HOST:PORT of the joining auditor are required"},
		{[]string{"join", "--as", "auditor-1", "--id", "Bad ID", "--addr", "x:1"}, "400 Bad Request: id: party id"},
		{[]string{"remove-peer", "--as", "auditor-1"}, "--id ID of the auditor to remove is required"},
		{[]string{"remove-peer", "--as", "hospital-1", "--id", "auditor-3"}, "403 Forbidden"},
		// One auditor's certificate adds no voter and removes no other auditor.
		{[]string{"join", "--as", "auditor-1", "--id", "rogue-1", "--addr", "127.0.0.1:7509"}, "may change only its own membership"},
		{[]string{"remove-peer", "--as", "auditor-1", "--id", "auditor-3"}, "may change only its own membership"},
	} {
		text, err := runNZC(t, append(append([]string{"ledger"}, tc.args...), api...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%v: %v, want %q\n%s", tc.args, err, tc.want, text)
		}
	}
	if len(cluster.joined) != 1 || len(cluster.removed) != 1 {
		t.Fatalf("a refused request reached the cluster: %v %v", cluster.joined, cluster.removed)
	}
}

func TestLedgerSnapshotSaveRestore(t *testing.T) {
	f := newLedgerFixture(t)
	st := f.log(t, 0)
	addr, _, _ := f.complianceAPI(t, st, 3)
	file := filepath.Join(t.TempDir(), "a1.snapshot")
	text, err := runNZC(t, "ledger", "snapshot", "save", "--api", addr, "--federation", f.dir, "--as", "auditor-1", "--out", file)
	if err != nil || !strings.Contains(text, "4 ledger entries (root "+st.RootHash().String()+") at raft index 9, term 3, taken by auditor-1") {
		t.Fatalf("save: %v\n%s", err, text)
	}
	if text, err := runNZC(t, "ledger", "snapshot", "save", "--api", addr, "--federation", f.dir, "--as", "compliance", "--out", file+"2"); err == nil {
		t.Fatalf("compliance took a snapshot:\n%s", text)
	}

	dir := filepath.Join(t.TempDir(), "data")
	cp := f.write(t, "head.checkpoint", f.checkpoint(t, st, 2))
	checked := []string{"--checkpoint", cp, "--federation", f.dir}
	text, err = runNZC(t, append([]string{"ledger", "snapshot", "restore", "--data-dir", dir, "--in", file}, checked...)...)
	if err != nil || !strings.Contains(text, "restored "+dir) || strings.Contains(text, "kept at") || !strings.Contains(text, "extends the cosigned checkpoints "+cp) {
		t.Fatalf("restore into a new directory: %v\n%s", err, text)
	}
	text, err = runNZC(t, "ledger", "snapshot", "restore", "--data-dir", dir, "--in", file, "--unchecked", "--format", "json")
	var s snapshotSummary
	if err != nil || json.Unmarshal([]byte(text), &s) != nil || s.Restore == nil || s.Restore.Previous != dir+".replaced-1" || s.Entries != 4 || s.Restore.Index != 9 || len(s.ExtendsCheckpoints) != 0 {
		t.Fatalf("restore over a directory: %v %+v\n%s", err, s, text)
	}
	if _, err := os.Stat(filepath.Join(dir, "snapshots")); err != nil {
		t.Fatalf("no raft snapshot in the restored directory: %v", err)
	}

	// A damaged file or a log that does not replay changes nothing.
	b, _ := os.ReadFile(file)
	damaged := f.write(t, "damaged.snapshot", append(slices.Clone(b[:len(b)-1]), b[len(b)-1]^1))
	sf, _ := raftnode.DecodeSnapshotFile(b)
	entries, _ := st.Entries(0, st.TreeSize())
	entries[2][len(entries[2])-1] ^= 1
	sf.State, _ = encodeSnapshotEntries(t, entries)
	forged, _ := sf.Encode()
	forgedPath := f.write(t, "forged.snapshot", forged)
	// A file rolled back to fewer entries than the auditors cosigned: it
	// replays, and only the checkpoint shows that charges were dropped.
	entries, _ = st.Entries(0, st.TreeSize())
	sf.State, _ = encodeSnapshotEntries(t, entries[:3])
	short, _ := sf.Encode()
	shortPath := f.write(t, "short.snapshot", short)
	lone := f.write(t, "lone.checkpoint", f.checkpoint(t, st, 1))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append([]string{"--data-dir", dir, "--in", damaged}, checked...), "checksum does not match"},
		{append([]string{"--data-dir", dir, "--in", forgedPath}, checked...), "does not restore, nothing changed"},
		{append([]string{"--data-dir", dir, "--in", shortPath}, checked...), "cosigned 4 entries, the log has 3: it was rolled back"},
		{[]string{"--data-dir", dir, "--in", file, "--checkpoint", lone, "--federation", f.dir}, "a majority (2) must sign"},
		{[]string{"--data-dir", dir, "--in", file}, "--checkpoint FILE is required"},
		{[]string{"--data-dir", dir, "--in", file, "--checkpoint", cp}, "--federation DIR or --keys"},
		{[]string{"--data-dir", dir, "--in", file, "--checkpoint", cp, "--unchecked"}, "exclude each other"},
		{[]string{"--in", file}, "--data-dir DIR"},
	} {
		text, err := runNZC(t, append([]string{"ledger", "snapshot", "restore"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%v: %v, want %q\n%s", tc.args, err, tc.want, text)
		}
	}
	if _, err := os.Stat(dir + ".replaced-2"); err == nil {
		t.Fatal("a refused restore replaced the data directory")
	}
}

// encodeSnapshotEntries builds a ledger snapshot of the given entries: the
// same bytes as an export's entries with the snapshot tag.
func encodeSnapshotEntries(t *testing.T, entries [][]byte) ([]byte, error) {
	t.Helper()
	x, err := ledger.Export{Entries: entries}.Encode()
	if err != nil {
		return nil, err
	}
	// version | tag | count | entries | keys (u32 0) | checkpoints (u32 0)
	b := slices.Clone(x[:len(x)-8])
	b[1] = 'S'
	return b, nil
}

// TestLedgerVerifyNamesEveryEntry changes one byte in each entry in turn,
// removes each entry in turn, and requires the first failure to name it.
func TestLedgerVerifyNamesEveryEntry(t *testing.T) {
	f := newLedgerFixture(t)
	st := f.log(t, 0)
	for i := range int(st.TreeSize()) {
		for _, pos := range []string{"first", "middle", "last"} {
			x := f.export(t, st)
			e := slices.Clone(x.Entries[i])
			at := map[string]int{"first": 0, "middle": len(e) / 2, "last": len(e) - 1}[pos]
			e[at] ^= 0x10
			x.Entries[i] = e
			out := f.fails(t, "--export", f.encode(t, x))
			if fl := failLines(out); len(fl) == 0 || !strings.Contains(fl[0], fmt.Sprintf("[entry %d]", i)) {
				t.Fatalf("the %s byte of entry %d changed: the first failure does not name it:\n%s", pos, i, out)
			}
		}
		x := f.export(t, st)
		x.Entries = slices.Delete(x.Entries, i, i+1)
		out := f.fails(t, "--export", f.encode(t, x))
		if fl := failLines(out); len(fl) == 0 || !strings.Contains(fl[0], fmt.Sprintf("[entry %d]", i)) {
			if i < int(st.TreeSize())-1 {
				t.Fatalf("entry %d removed: the first failure does not name it:\n%s", i, out)
			}
			// Removing the last entry leaves a shorter, intact log: what
			// names it is the checkpoint, which covers one entry more.
			if !strings.Contains(out, "entries were removed") {
				t.Fatalf("the last entry removed: no failure says so:\n%s", out)
			}
		}
	}
}
