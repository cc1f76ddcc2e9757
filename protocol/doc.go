// Package protocol defines the federation's wire format: frames, message
// types, the protobuf messages of package nzcpb and typed error codes. It
// knows nothing of the transport; protocol/quicnet carries frames over QUIC.
//
// A frame is
//
//	uvarint type | uvarint length | body
//
// where body is a deterministically encoded protobuf message of the given
// type and length never exceeds a hard limit (DefaultMaxBody unless the
// connection sets another).
package protocol
