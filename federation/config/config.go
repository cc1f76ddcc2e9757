// Package config holds the typed configuration of every NZC binary, with
// defaults and validation. It does not read files or the environment: the
// cli package loads values into these types (flag > NZC_* environment >
// YAML file > default) and then calls Validate.
//
// Every field carries the same name in its `mapstructure` and `yaml` tags;
// that name, joined with dots, is the configuration key (tls.cert), the
// environment variable (NZC_TLS_CERT) and the flag (--tls-cert).
package config

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// FieldError is one problem with one configuration key.
type FieldError struct {
	Key     string // dotted key, e.g. "tls.cert"
	Problem string // what is wrong and what to do about it
}

func (e FieldError) Error() string { return e.Key + ": " + e.Problem }

// ValidationError lists every problem found in a configuration.
type ValidationError struct {
	Problems []FieldError
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString("invalid configuration:")
	for _, p := range e.Problems {
		b.WriteString("\n  - ")
		b.WriteString(p.Error())
	}
	return b.String()
}

// ErrInvalid is matched by every *ValidationError (errors.Is).
var ErrInvalid = errors.New("invalid configuration")

// Is lets errors.Is(err, ErrInvalid) match a *ValidationError.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// checker collects field problems.
type checker struct{ problems []FieldError }

func (c *checker) add(key, format string, args ...any) {
	c.problems = append(c.problems, FieldError{Key: key, Problem: fmt.Sprintf(format, args...)})
}

func (c *checker) err() error {
	if len(c.problems) == 0 {
		return nil
	}
	return &ValidationError{Problems: c.problems}
}

func (c *checker) required(key, value, what string) {
	if strings.TrimSpace(value) == "" {
		c.add(key, "required: %s", what)
	}
}

// keyFile checks the path of a file holding a secret key: required, and
// not the key itself. A key pasted in place of its path (in the file, a
// flag or an NZC_* variable) is refused without repeating it, so that the
// error does not put the secret in logs or terminals.
func (c *checker) keyFile(key, value, what string) {
	c.required(key, value, what)
	if looksLikeKey(value) {
		c.add(key, "holds what looks like a key itself, not the path of a key file: write the key to a file only its owner can read (mode 0600) and give that path (the value is not shown here)")
	}
}

// looksLikeKey says whether a path setting holds key material instead: a
// PEM block, an age identity, or text no path has.
func looksLikeKey(v string) bool {
	u := strings.ToUpper(v)
	return strings.Contains(u, "PRIVATE KEY") || strings.Contains(u, "AGE-SECRET-KEY-") ||
		strings.ContainsAny(v, "\n\r") || len(v) > 4096
}

// verifierKeys checks a list of note verifier keys (auditor+hash+key), one
// per auditor, at least one.
func (c *checker) verifierKeys(key string, keys []string, why string) {
	if len(keys) == 0 {
		c.add(key, "required: the auditors' verifier keys, as nzc init writes them (%s)", why)
		return
	}
	seen := map[string]bool{}
	for _, k := range keys {
		v, err := note.NewVerifier(k)
		if err != nil {
			c.add(key, "%q is not a verifier key (auditor+hash+key): %v", k, err)
			continue
		}
		if seen[v.Name()] {
			c.add(key, "two keys for auditor %s", v.Name())
		}
		seen[v.Name()] = true
	}
}

// address checks a host:port; empty is reported only when required.
func (c *checker) address(key, value string, required bool, what string) {
	if value == "" {
		if required {
			c.add(key, "required: %s (host:port, e.g. 127.0.0.1:7400)", what)
		}
		return
	}
	host, port, err := net.SplitHostPort(value)
	if err != nil {
		c.add(key, "%q is not host:port (e.g. 127.0.0.1:7400): %v", value, err)
		return
	}
	_ = host
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		c.add(key, "port %q is not a number between 0 and 65535", port)
	}
}

func (c *checker) positive(key string, value int, what string) {
	if value <= 0 {
		c.add(key, "must be a positive integer (%s); got %d", what, value)
	}
}

func (c *checker) oneOf(key, value string, allowed ...string) {
	for _, a := range allowed {
		if value == a {
			return
		}
	}
	c.add(key, "%q is not one of %s", value, strings.Join(allowed, ", "))
}

func (c *checker) id(key, value, what string) {
	if value == "" {
		c.add(key, "required: %s", what)
		return
	}
	for _, r := range value {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			c.add(key, "%q may contain only lower-case letters, digits, '-' and '_'", value)
			return
		}
	}
}
