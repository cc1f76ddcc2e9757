// Package faults holds the federation's fault tests: they build the party
// binaries, provision a federation with `nzc init`, run every party as its
// own process on loopback — with test-controlled proxies between the
// aggregator and the auditors and among the auditors — and crash, cut off
// and restart parties, checking after each fault what the ledger and the
// student's received labels must show: no label without a committed charge,
// no charge lost or counted twice, one charge per batch, and the same
// labels for a retried batch. It also runs the federation `nzc init
// --teachers 30` writes, mechanism and caps untouched, and holds its labels
// to the teachers' clean vote (TestInitSizedFederation). It has no code
// outside its tests.
package faults
