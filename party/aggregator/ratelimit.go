package aggregator

import "time"

// Defaults of the per-hospital limit on relayed ledger commands: a hospital
// relays two at start (its registration and its account opening) and a
// cap change now and then.
const (
	DefaultRelayBurst = 8
	DefaultRelayEvery = 5 * time.Second
)
