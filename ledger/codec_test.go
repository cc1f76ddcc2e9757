package ledger

import (
	"bytes"
	"crypto/sha256"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// goldenCommands are one command of each kind, signed with fixed keys.
func goldenCommands(t testing.TB) map[string][]byte {
	f := &fed{t: t, st: New()}
	curve := gaussCurve(40, 100)
	curve[len(curve)-1] = math.Inf(1) // +Inf is a legal RDP value and must encode
	return map[string][]byte{
		"genesis":          f.sign(genesisBody(), "admin"),
		"register-party":   f.sign(&RegisterParty{Party: testParty("h4", RoleHospital), Timestamp: 1_700_000_000_000_000_001}, "admin"),
		"open-account":     f.sign(&OpenAccount{Hospital: "h1", CapEpsilon: 8, CapDelta: 1e-5, Timestamp: 1_700_000_000_000_000_002}, "h1"),
		"change-cap":       f.sign(&ChangeCap{Hospital: "h1", Version: 1, CapEpsilon: 4, CapDelta: 1e-6, Timestamp: 1_700_000_000_000_000_003}, "h1"),
		"register-student": f.sign(&RegisterStudent{Student: "s1", MaxAnswers: 1000, Timestamp: 1_700_000_000_000_000_004}, "admin"),
		"charge": f.sign(&Charge{BatchID: "batch-0001", Student: "s1", Hospitals: []string{"h1", "h2"}, Mechanism: "gnmax",
			Params: []Param{{Key: "sigma", Value: "40"}, {Key: "threshold", Value: "none"}}, Queries: 100, Answers: 97,
			Curve: curve, Delta: 1e-9, AnswersHash: sha256.Sum256([]byte("answers")), Timestamp: 1_700_000_000_000_000_005}, "agg"),
		"open-session": f.sign(&OpenSession{SessionID: "svt-1", Student: "s1", Hospitals: []string{"h1", "h2", "h3"}, Mechanism: "nzc-svt",
			Params: []Param{{Key: "k", Value: "10"}}, MaxRefusals: 10, Curve: gaussCurve(10, 3), Timestamp: 1_700_000_000_000_000_006}, "agg"),
		"close-session":     f.sign(&CloseSession{SessionID: "svt-1", Queries: 500, Answers: 490, Timestamp: 1_700_000_000_000_000_007}, "agg"),
		"register-ensemble": f.sign(&RegisterEnsemble{Hospital: "h1", Version: 1, Teachers: 250, Classes: 10, Timestamp: 1_700_000_000_000_000_008}, "admin"),
		"charge-v2": f.sign(&Charge{BatchID: "batch-0002", Student: "s1", Hospitals: []string{"h1", "h2"}, Mechanism: "gnmax",
			Params: []Param{{Key: "sigma", Value: "40"}, {Key: "threshold", Value: "none"}}, Queries: 100, Answers: 97,
			Curve: curve, Delta: 1e-9, AnswersHash: sha256.Sum256([]byte("answers")), Timestamp: 1_700_000_000_000_000_009,
			Ensembles: []uint64{100, 150}}, "agg"),
		"genesis-v2": f.sign(boundedGenesis(10, 1e-6), "admin"),
		"genesis-v3": f.sign(sharedGenesis(10, 1e-6, 0.5), "admin"),
		"reserve": f.sign(&Reserve{BatchID: "batch-0003", Student: "s1", Hospitals: []string{"h1", "h2"}, Mechanism: "gnmax",
			Params: []Param{{Key: "sigma", Value: "40"}, {Key: "threshold", Value: "none"}}, Queries: 100,
			Curve: curve, Delta: 1e-9, Timestamp: 1_700_000_000_000_000_010}, "agg"),
		"suspend": f.sign(&Suspend{Hospital: "h3", Version: 1, Suspended: true, Reason: "12 sessions burnt without an answer",
			Timestamp: 1_700_000_000_000_000_011}, "admin"),
	}
}

// boundedGenesis is genesisBody stating the cap bounds ε and δ.
func boundedGenesis(epsilon, delta float64) *Genesis {
	g := genesisBody()
	g.EpsilonBound, g.DeltaBound = epsilon, delta
	return g
}

// sharedGenesis is boundedGenesis also stating the student share.
func sharedGenesis(epsilon, delta, share float64) *Genesis {
	g := boundedGenesis(epsilon, delta)
	g.StudentShare = share
	return g
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: encoding changed (%d bytes, golden %d); if intended, bump Version or run -update", name, len(got), len(want))
	}
}

func TestGoldenCommands(t *testing.T) {
	for name, b := range goldenCommands(t) {
		t.Run(name, func(t *testing.T) {
			golden(t, "command-"+name+".bin", b)
			c, err := DecodeCommand(b)
			if err != nil {
				t.Fatal(err)
			}
			if c.Body.Kind().String() != name {
				t.Fatalf("decoded kind %s", c.Body.Kind())
			}
			again, err := c.Encode()
			if err != nil || !bytes.Equal(again, b) {
				t.Fatalf("re-encoding differs (%v)", err)
			}
		})
	}
}

// goldenLog is a small ledger covering every command and outcome kind.
func goldenLog(t testing.TB) *fed {
	f := newFed(t)
	f.must(chargeBody("b1", []string{"h1", "h3"}, gaussCurve(40, 10), 10), "agg")
	f.apply(f.sign(chargeBody("b2", []string{"h2"}, gaussCurve(1, 10), 10), "agg")) // refused: cap
	f.apply(f.sign(chargeBody("b1", []string{"h1", "h3"}, gaussCurve(40, 10), 10), "agg"))
	f.apply([]byte("garbage"))
	f.must(openSession(t, "svt1", "s1", []string{"h1"}, 5), "agg")
	f.must(&CloseSession{SessionID: "svt1", Queries: 10, Answers: 8}, "agg")
	return f
}

func TestGoldenEntriesAndSnapshot(t *testing.T) {
	f := goldenLog(t)
	snap, err := f.st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "snapshot-records.bin", snap)
	_, entries := goldenEntries(t)
	if en, err := DecodeEntry(entries[7]); err != nil || en.Record == nil || en.Command != nil || en.Status != StatusRefused {
		t.Fatalf("entry 7: %+v %v, want a refusal record", en, err)
	}
	golden(t, "entry-refusal-record.bin", entries[7])
	for i, b := range entries {
		en, err := DecodeEntry(b)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		again, _ := en.Encode()
		if !bytes.Equal(again, b) {
			t.Fatalf("entry %d re-encodes differently", i)
		}
	}
	if en, _ := DecodeEntry(entries[8]); en.Status != StatusDuplicate || en.Original != 6 {
		t.Fatalf("entry 8 is %s original %d, want the duplicate of entry 6", en.Status, en.Original)
	}
	root := f.st.RootHash()
	golden(t, "root-records.txt", []byte(root.String()+"\n"))
}

func TestDecodeRejects(t *testing.T) {
	cmds := goldenCommands(t)
	charge := cmds["charge"]
	negZero := bytes.Clone(cmds["open-account"])
	// The cap ε follows version, kind and the hospital id "h1" (4+2 bytes).
	copy(negZero[2+6:], []byte{0x80, 0, 0, 0, 0, 0, 0, 0})
	nan := bytes.Clone(cmds["open-account"])
	copy(nan[2+6:], []byte{0x7f, 0xf8, 0, 0, 0, 0, 0, 1})
	unsorted := &Charge{BatchID: "b", Student: "s", Hospitals: []string{"h2", "h1"}, Mechanism: "m", Curve: []float64{0}}
	if _, err := (Command{Body: unsorted, Signer: "agg", Signature: make([]byte, 64)}).Encode(); err == nil {
		t.Error("encoded unsorted hospitals")
	}
	tests := map[string][]byte{
		"empty":           nil,
		"unknown version": append([]byte{2}, charge[1:]...),
		"unknown kind":    append([]byte{1, 99}, charge[2:]...),
		"trailing byte":   append(bytes.Clone(charge), 0),
		"truncated":       charge[:len(charge)-1],
		"negative zero":   negZero,
		"NaN":             nan,
	}
	for name, b := range tests {
		if _, err := DecodeCommand(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	entry := goldenEntry(t)
	for name, b := range map[string][]byte{
		"entry version":  append([]byte{9}, entry[1:]...),
		"entry trailing": append(bytes.Clone(entry), 1),
		// status u8 | code u8 | subject (u32 length 0) | original u64: 14 bytes.
		"entry status": append(append(bytes.Clone(entry[:len(entry)-14]), 9), entry[len(entry)-13:]...),
		"entry code":   append(append(bytes.Clone(entry[:len(entry)-13]), byte(CodeCapExceeded)), entry[len(entry)-12:]...),
	} {
		if _, err := DecodeEntry(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// goldenEntries returns the golden log and all its entries, encoded.
func goldenEntries(t testing.TB) (*fed, [][]byte) {
	f := goldenLog(t)
	es, _ := f.st.Entries(0, f.st.TreeSize())
	return f, es
}

func goldenEntry(t testing.TB) []byte {
	f := goldenLog(t)
	es, _ := f.st.Entries(6, 7)
	return es[0]
}

// reencodes checks that b, when decode accepts it, encodes again to the
// same bytes, and reports whether decode accepted it.
func reencodes[T interface{ Encode() ([]byte, error) }](t *testing.T, b []byte, decode func([]byte) (T, error)) bool {
	t.Helper()
	v, err := decode(b)
	if err != nil {
		return false
	}
	again, err := v.Encode()
	if err != nil || !bytes.Equal(again, b) {
		t.Fatalf("decode→encode changed the bytes (%v)", err)
	}
	return true
}

func FuzzDecodeCommand(f *testing.F) {
	for _, b := range goldenCommands(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { reencodes(t, b, DecodeCommand) })
}

func FuzzDecodeEntry(f *testing.F) {
	_, es := goldenEntries(f) // refusal records among them
	for _, b := range es {
		f.Add(b)
	}
	for _, name := range []string{"entry-refused.bin", "entry-duplicate.bin", "entry-refusal-record.bin"} {
		if b, err := os.ReadFile(filepath.Join("testdata", name)); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) { reencodes(t, b, DecodeEntry) })
}

func FuzzRestore(f *testing.F) {
	g := goldenLog(f)
	snap, _ := g.st.Snapshot()
	f.Add(snap)
	f.Add(snap[:40])
	f.Fuzz(func(t *testing.T, b []byte) {
		st := New()
		if err := st.Restore(b); err != nil {
			if st.TreeSize() != 0 {
				t.Fatal("a failed restore changed the state")
			}
			return
		}
		again, err := st.Snapshot()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("restore→snapshot changed the bytes (%v)", err)
		}
	})
}

// An export written when nzc-svt sessions were charged only the split
// bound on δ (larger than today's) still verifies: each session states at
// least the cost recomputed now, so old ledgers replay unchanged.
func TestVerifyExportChargedSplitDelta(t *testing.T) {
	f, _ := goldenExport(t)
	b, err := os.ReadFile(filepath.Join("testdata", "export-split-delta.bin"))
	if err != nil {
		t.Fatal(err)
	}
	r := Verify(b, VerifyOptions{TrustedKeys: auditorKeys(t, f.st), Unpinned: true})
	if !r.OK || r.Entries != 12 || r.Accepted != 9 {
		var sb strings.Builder
		r.WriteText(&sb)
		t.Fatalf("the earlier export failed:\n%s", sb.String())
	}
}

// A log written before refusal records (testdata/snapshot.bin, whose
// refused entries hold their commands, as testdata/entry-refused.bin)
// still decodes, restores and replays to the same entries; the same
// commands applied now record each refusal as a fixed-size record, whose
// size does not grow with the refused command.
func TestLogsBeforeRefusalRecordsStillReplay(t *testing.T) {
	old, err := os.ReadFile(filepath.Join("testdata", "snapshot.bin"))
	if err != nil {
		t.Fatal(err)
	}
	st := New()
	if err := st.Restore(old); err != nil {
		t.Fatalf("restore a log with whole refused commands: %v", err)
	}
	again, err := st.Snapshot()
	if err != nil || !bytes.Equal(again, old) {
		t.Fatalf("the restored log differs from the file (%v)", err)
	}
	// Its entries and root are the golden ones of that encoding.
	oldEntries, _ := st.Entries(0, st.TreeSize())
	golden(t, "entry-duplicate.bin", oldEntries[8])
	golden(t, "root.txt", []byte(st.RootHash().String()+"\n"))
	refused, err := os.ReadFile(filepath.Join("testdata", "entry-refused.bin"))
	if err != nil {
		t.Fatal(err)
	}
	en, err := DecodeEntry(refused)
	if err != nil || en.Record != nil || len(en.Command) == 0 || en.Status != StatusRefused {
		t.Fatalf("entry-refused.bin: %+v %v", en, err)
	}
	// The same log applied now has the same state, with records.
	f := goldenLog(t)
	if f.st.TreeSize() != st.TreeSize() || fmt.Sprint(f.st.Accounts()) != fmt.Sprint(st.Accounts()) {
		t.Fatalf("%d entries and accounts %v now, %d and %v before", f.st.TreeSize(), f.st.Accounts(), st.TreeSize(), st.Accounts())
	}
	for _, size := range []int{10, 1 << 10, MaxCommandSize} {
		junk := bytes.Repeat([]byte{0xee}, size)
		f.apply(junk)
		es, _ := f.st.Entries(f.st.TreeSize()-1, f.st.TreeSize())
		en, err := DecodeEntry(es[0])
		if err != nil || en.Record == nil || en.Record.Digest != sha256.Sum256(junk) || len(es[0]) > 128 {
			t.Fatalf("a refused command of %d bytes is an entry of %d bytes (%+v, %v)", size, len(es[0]), en.Record, err)
		}
	}
	// And replays from its snapshot.
	snap, err := f.st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := New().Restore(snap); err != nil {
		t.Fatalf("restore a log with refusal records: %v", err)
	}
}
