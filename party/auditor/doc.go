// Package auditor assembles one member of the auditor cluster, the one place
// an auditor is put together: New starts the raft node (package raftnode)
// replicating the privacy ledger (Ledger, which signs a checkpoint after
// every applied batch), the charge intake for the aggregator (package
// intake), the compliance API (package compliance), the dashboard (package
// dashboard) and the operations endpoint (internal/ops), all with mutual TLS
// built from the federation CA and this auditor's credential; Run serves
// them and applies the genesis (ApplyGenesis) until its context ends.
//
// nzc-auditor, the in-process federations of the benchmarks and the
// end-to-end tests all start their auditors with New.
package auditor
