// Package aggregator is the neutral party between students and hospitals.
// For each label batch it fans the student's sealed queries out to the
// connected hospitals, sums the vote histograms of those that answer before
// the deadline, runs the configured differential-privacy mechanism with a
// cryptographic random source, and releases the labels only after the
// ledger has committed the charge that covers them (DESIGN.md, "The release
// rule").
//
// Every batch passes through a durable outbox. Before the charge is proposed
// to the ledger, the answers — sealed to the student — and the signed charge
// are written to disk in the pending state. A retry of the batch, or a
// restart after a crash, re-proposes the identical charge (the ledger
// recognises it and charges nothing twice) and then delivers the stored
// answers: the same batch never gets fresh noise.
package aggregator
