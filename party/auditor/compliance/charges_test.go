package compliance

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/ledger"
)

// A hospital reads the charges naming itself, each with a receipt it can
// check against the auditors' keys; it may not read another hospital's.
func TestHospitalReadsItsOwnCharges(t *testing.T) {
	f := newFixture(t, 5)
	h := (&API{Cluster: f.cluster, Ledger: f.st, Self: "a1"}).Handler()
	keys, err := f.st.AuditorKeys(f.st.TreeSize())
	if err != nil {
		t.Fatal(err)
	}
	var page Charges
	code, body := serve(h, as("GET", "/v1/charges?limit=3", "hospital", "h1", ""))
	if code != http.StatusOK || json.Unmarshal(body, &page) != nil {
		t.Fatalf("%d %s", code, body)
	}
	if page.Hospital != "h1" || len(page.Charges) != 3 || page.Next == nil {
		t.Fatalf("page %+v", page)
	}
	var all []Charge
	all = append(all, page.Charges...)
	code, body = serve(h, as("GET", "/v1/charges?start="+itoa(*page.Next), "hospital", "h1", ""))
	if code != http.StatusOK || json.Unmarshal(body, &page) != nil || page.Next != nil {
		t.Fatalf("%d %s", code, body)
	}
	all = append(all, page.Charges...)
	if len(all) != 5 {
		t.Fatalf("%d charges, want 5", len(all))
	}
	receipts, err := ledger.NewVerifier(keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range all {
		ch, en, _, err := receipts.HospitalReceipt(c.Receipt, "h1")
		if err != nil || int64(en.Index) != c.Index || ch.BatchID != c.BatchID {
			t.Fatalf("charge %+v: %v", c, err)
		}
	}
	for _, tc := range []struct {
		path, role, id string
		code           int
		want           string
	}{
		{"/v1/charges?hospital=h2", "hospital", "h1", http.StatusForbidden, "only the charges naming itself"},
		{"/v1/charges", "compliance", "compliance", http.StatusBadRequest, "parameter hospital is required"},
		{"/v1/charges?hospital=h2", "student", "s1", http.StatusForbidden, "may not read charges"},
		{"/v1/charges?hospital=h2", "aggregator", "agg", http.StatusForbidden, "may not read the ledger"},
	} {
		code, body := serve(h, as("GET", tc.path, tc.role, tc.id, ""))
		if code != tc.code || !strings.Contains(string(body), tc.want) {
			t.Fatalf("%s as %s: %d %s, want %d %q", tc.path, tc.id, code, body, tc.code, tc.want)
		}
	}
	getJSON(t, h, "/v1/charges?hospital=h2", "compliance", &page)
	if len(page.Charges) != 5 || page.Hospital != "h2" {
		t.Fatalf("compliance reading h2's charges: %+v", page)
	}
}
