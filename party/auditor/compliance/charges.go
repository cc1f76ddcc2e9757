package compliance

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
)

// Charges is GET /v1/charges: the accepted charges that name one
// hospital, each with its receipt (the entry, its inclusion proof and the
// checkpoint the auditors cosigned for this answer), so that the hospital
// can check them against its own record of the batches it voted on
// without trusting this auditor.
type Charges struct {
	Hospital string `json:"hospital"`
	Start    int64  `json:"start"`
	Size     int64  `json:"size"` // entries covered by the checkpoint
	// Next is where the following page starts; null at the end.
	Next    *int64   `json:"next"`
	Charges []Charge `json:"charges"`
}

// Charge is one accepted charge naming the hospital.
type Charge struct {
	Index     int64          `json:"index"`
	BatchID   string         `json:"batch"`
	Student   string         `json:"student"`
	Hospitals []string       `json:"hospitals"`
	Mechanism string         `json:"mechanism"`
	Queries   uint64         `json:"queries"`
	Answers   uint64         `json:"answers"`
	Receipt   ledger.Receipt `json:"receipt"`
}

// charges serves GET /v1/charges. A hospital reads only the charges naming
// itself (a hospital= parameter naming another is refused); the compliance
// and auditor roles name the hospital with hospital=.
func (a *API) charges(w http.ResponseWriter, r *http.Request, p crypto.Peer) error {
	hospital := r.URL.Query().Get("hospital")
	switch {
	case p.Role == crypto.RoleStudent:
		return refuse(http.StatusForbidden, fmt.Sprintf("%s may not read charges: they name other students' batches; a student reads the accounts, checkpoints and proofs", p))
	case p.Role == crypto.RoleHospital && hospital != "" && hospital != p.ID:
		return refuse(http.StatusForbidden, fmt.Sprintf("%s may read only the charges naming itself, not %s's", p, hospital))
	case p.Role == crypto.RoleHospital:
		hospital = p.ID
	case hospital == "":
		return refuse(http.StatusBadRequest, "parameter hospital is required: the hospital whose charges to list")
	}
	ctx, cancel := context.WithTimeout(r.Context(), cosignTimeout)
	defer cancel()
	signed, err := a.Cluster.CosignCheckpoint(ctx)
	if err != nil {
		return refuse(http.StatusServiceUnavailable, "no checkpoint a majority cosigned, so no receipts: "+err.Error())
	}
	cp, err := ledger.PeekCheckpoint(signed)
	if err != nil {
		return err
	}
	start, limit, err := page(r, cp.Size, "cosigned log")
	if err != nil {
		return err
	}
	out, err := hospitalCharges(a.Ledger, signed, cp.Size, hospital, start, limit)
	if err != nil {
		return err
	}
	return writeJSON(w, out)
}

// chargeScan bounds how many entries one page reads.
const chargeScan = 100_000

// hospitalCharges returns up to limit accepted charges naming hospital
// among the entries from start up to size, with receipts against signed.
func hospitalCharges(st *ledger.State, signed []byte, size int64, hospital string, start, limit int64) (Charges, error) {
	out := Charges{Hospital: hospital, Start: start, Size: size, Charges: []Charge{}}
	end := min(size, start+chargeScan)
	raw, err := st.Entries(start, end)
	if err != nil {
		return out, err
	}
	for k, b := range raw {
		i := start + int64(k)
		_, cmd, ok := ledger.AcceptedCommand(b)
		if !ok {
			continue
		}
		ch, ok := cmd.Body.(*ledger.Charge)
		if !ok || !slices.Contains(ch.Hospitals, hospital) {
			continue
		}
		if int64(len(out.Charges)) == limit {
			out.Next = &i
			return out, nil
		}
		rc, err := st.Receipt(i, signed)
		if err != nil {
			return out, errors.Join(fmt.Errorf("receipt of entry %d", i), err)
		}
		out.Charges = append(out.Charges, Charge{Index: i, BatchID: ch.BatchID, Student: ch.Student, Hospitals: ch.Hospitals,
			Mechanism: ch.Mechanism, Queries: ch.Queries, Answers: ch.Answers, Receipt: rc})
	}
	if end < size {
		out.Next = &end
	}
	return out, nil
}
