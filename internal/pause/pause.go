// Package pause stops a party binary, once, at a named point of its work
// (for example pending-written in nzc-aggregator) until it is killed: the
// fault tests crash parties in a known state with it. The launcher sets the
// environment variable, the binaries read it. The hook exists only in
// binaries built with the build tag nzctest (launch.BuildWithTestHooks, as
// the fault tests build them): in any other build Hook is nil whatever the
// environment says, so a production binary cannot be stopped this way.
package pause

// Env names the environment variable that holds the point to stop at.
const Env = "NZCTEST_PAUSE_AT"

// At is the environment ("KEY=value") that stops a party at point; none
// for "".
func At(point string) []string {
	if point == "" {
		return nil
	}
	return []string{Env + "=" + point}
}

// everyPrefix marks a point to stop at every time it is reached.
const everyPrefix = "every:"

// Every is the environment that stops a party at point every time it gets
// there, until the request's context ends.
func Every(point string) []string {
	return []string{Env + "=" + everyPrefix + point}
}
