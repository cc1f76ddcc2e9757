package provision_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nzcfed/nzc/federation/provision"
)

// Provision a federation directory and find one party's files.
func ExampleProvision() {
	dir, _ := os.MkdirTemp("", "federation")
	defer os.RemoveAll(dir)
	m, err := provision.Provision(filepath.Join(dir, "fed"), provision.Spec{Hospitals: 2, Auditors: 3, Students: 1})
	if err != nil {
		panic(err)
	}
	for _, p := range m.Parties {
		fmt.Println(p.URI, p.Cert, p.SigningKey != "")
	}
	_, err = provision.Provision(filepath.Join(dir, "fed"), provision.Spec{Hospitals: 2, Auditors: 3, Students: 1})
	fmt.Println(err != nil)
	// Output:
	// nzc://hospital/hospital-1 hospital-1/tls.crt true
	// nzc://hospital/hospital-2 hospital-2/tls.crt true
	// nzc://aggregator/aggregator aggregator/tls.crt true
	// nzc://auditor/auditor-1 auditor-1/tls.crt true
	// nzc://auditor/auditor-2 auditor-2/tls.crt true
	// nzc://auditor/auditor-3 auditor-3/tls.crt true
	// nzc://student/student-1 student-1/tls.crt false
	// nzc://compliance/compliance compliance/tls.crt false
	// true
}
