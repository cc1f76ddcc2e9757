package ledger_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
)

// key derives a fixed key so the example's output is stable; real parties
// generate theirs with crypto/rand.
func key(name string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("example " + name))
	return ed25519.NewKeyFromSeed(seed[:])
}

func party(id string, role ledger.Role) ledger.Party {
	return ledger.Party{ID: id, Role: role, PublicKey: key(id).Public().(ed25519.PublicKey)}
}

// A federation's whole life in the ledger: genesis, a hospital's own cap, a
// student, a charge computed with mechanism, a refused charge, auditors
// signing a checkpoint, and an officer verifying the export offline.
func Example() {
	st := ledger.New()
	apply := func(b ledger.Body, signer string) ledger.Result {
		cmd, err := ledger.Sign(b, signer, key(signer))
		if err != nil {
			panic(err)
		}
		r, err := st.Apply(cmd)
		if err != nil {
			panic(err)
		}
		return r
	}
	apply(&ledger.Genesis{Origin: "example.org/ledger", Parties: []ledger.Party{
		party("admin", ledger.RoleAdmin), party("agg", ledger.RoleAggregator),
		party("aud1", ledger.RoleAuditor), party("aud2", ledger.RoleAuditor), party("aud3", ledger.RoleAuditor),
		party("hosp-a", ledger.RoleHospital), party("student", ledger.RoleStudent),
	}}, "admin")
	apply(&ledger.OpenAccount{Hospital: "hosp-a", CapEpsilon: 2, CapDelta: 1e-5}, "hosp-a")
	apply(&ledger.RegisterStudent{Student: "student"}, "admin")

	// 100 GNMax answers with σ = 40 by 250 teachers, accounted by
	// mechanism; the ledger derives the same cost from the parameters.
	grid := mechanism.DefaultGrid()
	p := mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Classes: 10, Sigma: 40}
	cost, err := p.Charge(grid, 100, 0)
	if err != nil {
		panic(err)
	}
	charge := func(batch string, c mechanism.Curve) ledger.Result {
		return apply(&ledger.Charge{BatchID: batch, Student: "student", Hospitals: []string{"hosp-a"},
			Mechanism: string(p.Mechanism), Params: p.LedgerParams(),
			Queries: 100, Answers: 100, Curve: c.Values(), AnswersHash: sha256.Sum256([]byte(batch))}, "agg")
	}
	fmt.Println(charge("batch-1", cost.RDP).Status)
	// A charge may state more than its cost (it is charged what it states),
	// never less.
	r := charge("batch-2", cost.RDP.Times(10))
	fmt.Println(r.Status, r.Code, r.Subject)

	// Two of three auditors sign the checkpoint; an officer verifies.
	cp, _ := st.Checkpoint()
	s1, _ := ledger.NewCheckpointSigner("aud1", key("aud1"), 1_700_000_000)
	s2, _ := ledger.NewCheckpointSigner("aud2", key("aud2"), 1_700_000_000)
	signed, _ := ledger.SignCheckpoint(cp, s1, s2)
	export, _ := st.Export([][]byte{signed})
	keys, _ := st.AuditorKeys(st.TreeSize())
	report := ledger.Verify(export, ledger.VerifyOptions{TrustedKeys: keys, Unpinned: true})
	fmt.Println("verified:", report.OK, "entries:", report.Entries)
	a := report.Accounts[0]
	fmt.Printf("%s: ε = %.3f of %g\n", a.Hospital, a.Epsilon, a.CapEpsilon)
	// Output:
	// accepted
	// refused cap-exceeded hosp-a
	// verified: true entries: 5
	// hosp-a: ε = 1.707 of 2
}
