// Package mechanism holds the privacy core: vote histograms, the aggregation
// mechanisms, secure integer noise, and privacy accounting in Rényi
// differential privacy.
//
// The package is pure: it uses the standard library only, takes randomness
// as an injected source and never reads the clock, so the ledger can replay
// its accounting deterministically.
package mechanism
