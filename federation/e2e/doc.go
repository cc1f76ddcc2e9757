// Package e2e holds the end-to-end test of a whole federation in one
// process: three auditors running raft over mutual TLS, the aggregator,
// three hospitals and a student, all speaking QUIC with mutual TLS on
// loopback and sealing their payloads with age.
package e2e
