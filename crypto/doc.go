// Package crypto holds the federation's key material and the operations on it:
// the federation certificate authority and the party certificates it issues,
// private key files, age sealing of private payloads, and the ed25519 signing
// keys of the aggregator, the auditors and the hospitals; the reading and
// writing of key files; and the reading of a federation directory's
// [Manifest] ([LoadManifest]), which every party does. What an
// administrator writes (the parties' keys and the manifest, the genesis,
// configurations, key requests, kits and bundles) is federation/provision's.
//
// It is the only package of the module that imports filippo.io/age. Callers
// see the small types [Identity] and [Recipient] instead.
//
// Every party certificate names its holder as a URI SAN of the form
// nzc://<role>/<id>, for example nzc://hospital/hospital-1. [VerifyPeer]
// checks a presented chain against the federation CA and returns that
// [Peer]; nothing else in a certificate is trusted for identity.
package crypto
