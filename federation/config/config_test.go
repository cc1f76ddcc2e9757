package config

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/mechanism"
)

func validTLS() TLS { return TLS{CA: "ca.pem", Cert: "c.pem", Key: "c.key"} }

func teacherWith(f func(*Teacher)) Validator {
	c := DefaultTeacher()
	c.ID, c.TLS, c.AgeIdentity = "h1", validTLS(), "h1.age"
	f(&c)
	return c
}

func aggWith(f func(*Aggregator)) Validator {
	c := DefaultAggregator()
	c.Auditors, c.TLS, c.AgeIdentity, c.SigningKey = []string{"127.0.0.1:7600"}, validTLS(), "a.age", "a.sig"
	c.AuditorKeys = []string{testAuditorKey}
	f(&c)
	return c
}

func TestValidate(t *testing.T) {
	teacher, agg := teacherWith, aggWith
	student := func(f func(*Student)) Validator {
		c := DefaultStudent()
		c.ID, c.TLS, c.AgeIdentity = "s1", validTLS(), "s.age"
		c.Hospitals = []string{"age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"}
		c.AuditorKeys = []string{testAuditorKey}
		f(&c)
		return c
	}
	auditor := func(f func(*Auditor)) Validator {
		c := DefaultAuditor()
		c.ID, c.TLS, c.SigningKey = "a1", validTLS(), "a.sig"
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name string
		cfg  Validator
		want string // substring of the error; "" means valid
	}{
		{"teacher valid", teacher(func(*Teacher) {}), ""},
		{"teacher missing id", teacher(func(c *Teacher) { c.ID = "" }), "id: required"},
		{"teacher part without parts", teacher(func(c *Teacher) { c.DataPart = 2 }), "data_part"},
		{"teacher part beyond parts", teacher(func(c *Teacher) { c.DataPart, c.DataParts = 4, 3 }), "data_part"},
		{"teacher zero cap", teacher(func(c *Teacher) { c.CapEpsilon = 0 }), "cap_epsilon"},
		{"teacher bad cap delta", teacher(func(c *Teacher) { c.CapDelta = 1 }), "cap_delta"},
		{"teacher bad id", teacher(func(c *Teacher) { c.ID = "H 1" }), "lower-case"},
		{"teacher bad address", teacher(func(c *Teacher) { c.Aggregator = "nohost" }), "aggregator: \"nohost\" is not host:port"},
		{"teacher bad port", teacher(func(c *Teacher) { c.Aggregator = "127.0.0.1:99999" }), "between 0 and 65535"},
		{"teacher missing cert", teacher(func(c *Teacher) { c.TLS.Cert = "" }), "tls.cert: required"},
		{"teacher zero teachers", teacher(func(c *Teacher) { c.Teachers = 0 }), "teachers: must be a positive integer"},
		{"teacher unknown model", teacher(func(c *Teacher) { c.Model = "resnet" }), "model: \"resnet\" is not one of"},
		{"teacher bad log level", teacher(func(c *Teacher) { c.Log.Level = "loud" }), "log.level"},
		{"aggregator valid", agg(func(*Aggregator) {}), ""},
		{"aggregator one class", agg(func(c *Aggregator) { c.Classes = 1 }), "classes: must be between 2"},
		{"aggregator no ensemble sizes", agg(func(c *Aggregator) { c.Teachers = 0 }), "ensembles: required when teachers is 0"},
		{"aggregator listed ensembles only", agg(func(c *Aggregator) { c.Teachers, c.Ensembles = 0, []string{"h1=50", "h2=20"} }), ""},
		{"aggregator bad ensemble", agg(func(c *Aggregator) { c.Ensembles = []string{"h1:50"} }), "is not hospital-id=teachers"},
		{"aggregator huge ensemble", agg(func(c *Aggregator) { c.Ensembles = []string{"h1=4000000000"} }), "a hospital has 1 to"},
		{"aggregator ensemble twice", agg(func(c *Aggregator) { c.Ensembles = []string{"h1=5", "h1=6"} }), "listed twice"},
		{"aggregator no auditors", agg(func(c *Aggregator) { c.Auditors = nil }), "nothing is released without a ledger"},
		{"aggregator no auditor keys", agg(func(c *Aggregator) { c.AuditorKeys = nil }), "receipt signed by a majority"},
		{"aggregator bad auditor key", agg(func(c *Aggregator) { c.AuditorKeys = []string{"a1+00+xx"} }), "not a verifier key"},
		{"student no auditor keys", student(func(c *Student) { c.AuditorKeys = nil }), "receipt signed by a majority"},
		{"aggregator unknown mechanism", agg(func(c *Aggregator) { c.Mechanism.Mechanism = "magic" }), "mechanism.name"},
		{"aggregator NaN sigma", agg(func(c *Aggregator) { c.Mechanism = mechanism.Params{Mechanism: "gnmax", Sigma: math.NaN()} }), "mechanism.sigma: sigma = NaN: must be a finite number"},
		{"aggregator negative scale", agg(func(c *Aggregator) { c.Mechanism = mechanism.Params{Mechanism: "lnmax", Scale: -1} }), "mechanism.scale"},
		{"aggregator nzc needs noise", agg(func(c *Aggregator) { c.Mechanism = mechanism.Params{Mechanism: "nzc", Scale: 1} }), "mechanism.noise"},
		{"aggregator svt needs K", agg(func(c *Aggregator) { c.Mechanism = mechanism.Params{Mechanism: "nzc-svt", Scale: 1} }), "mechanism.max_refusals"},
		{"aggregator svt threshold noise is scale", agg(func(c *Aggregator) { c.Mechanism = mechanism.Params{Mechanism: "nzc-svt", Sigma1: 1, MaxRefusals: 2} }), "mechanism.scale"},
		{"aggregator other mechanism's defaults ignored", agg(func(c *Aggregator) { c.Mechanism.Mechanism, c.Mechanism.Sigma = "gnmax", 40 }), ""},
		{"aggregator svt whose own δ is no guarantee", agg(func(c *Aggregator) {
			c.Mechanism = mechanism.Params{Mechanism: "nzc-svt", Scale: 1, Threshold: 2, MaxRefusals: 1}
		}), "guarantee nothing at that δ"},
		{"aggregator svt distance scale", agg(func(c *Aggregator) {
			c.Mechanism = mechanism.Params{Mechanism: "nzc-svt", Scale: 1, MaxRefusals: 2, DistanceScale: -1}
		}), "mechanism.distance_scale"},
		{"aggregator svt with a gnmax fallback", agg(func(c *Aggregator) {
			c.Mechanism = mechanism.Params{Mechanism: "nzc-svt", Scale: 1, Threshold: 240, MaxRefusals: 1}
			c.Fallback = mechanism.Params{Mechanism: "gnmax", Sigma: 40}
		}), ""},
		{"aggregator fallback beside a per-query mechanism", agg(func(c *Aggregator) { c.Fallback = mechanism.Params{Mechanism: "gnmax", Sigma: 40} }),
			"fallback: is offered only with a mechanism that answers in sessions"},
		{"aggregator session fallback", agg(func(c *Aggregator) {
			c.Mechanism = mechanism.Params{Mechanism: "nzc-svt", Scale: 1, Threshold: 240, MaxRefusals: 1}
			c.Fallback = c.Mechanism
		}), "fallback.name: nzc-svt answers in sessions"},
		{"aggregator fallback without noise", agg(func(c *Aggregator) {
			c.Mechanism = mechanism.Params{Mechanism: "nzc-svt", Scale: 1, Threshold: 240, MaxRefusals: 1}
			c.Fallback = mechanism.Params{Mechanism: "gnmax"}
		}), "fallback.sigma"},
		{"aggregator bad delta", agg(func(c *Aggregator) { c.Delta = 1 }), "delta: must be in (0, 1)"},
		{"aggregator zero deadline", agg(func(c *Aggregator) { c.BatchDeadline = 0 }), "batch_deadline"},
		{"student valid", student(func(*Student) {}), ""},
		{"student without hospitals", student(func(c *Student) { c.Hospitals = nil }), "hospitals"},
		{"student bad recipient", student(func(c *Student) { c.Hospitals = []string{"ssh-ed25519 AAAA"} }), "hospitals"},
		{"student huge batch", student(func(c *Student) { c.BatchSize = 1 << 20 }), "batch_size"},
		{"student no window", student(func(c *Student) { c.Window = 0 }), "window: must be between 1 and 16"},
		{"student window too wide", student(func(c *Student) { c.Window = 17 }), "window"},
		{"teacher small-cnn", teacher(func(c *Teacher) { c.Model = "small-cnn" }), ""},
		{"teacher small-mlp", teacher(func(c *Teacher) { c.Model = "small-mlp" }), ""},
		{"auditor valid", auditor(func(*Auditor) {}), ""},
		{"auditor pinned genesis", auditor(func(c *Auditor) { c.GenesisHash = strings.Repeat("ab", 32) }), ""},
		{"auditor short genesis hash", auditor(func(c *Auditor) { c.GenesisHash = "abcd" }), "not 64 hex digits"},
		{"auditor non-hex genesis hash", auditor(func(c *Auditor) { c.GenesisHash = strings.Repeat("zz", 32) }), "not 64 hex digits"},
		{"auditor bootstrap without peers", auditor(func(c *Auditor) { c.Bootstrap = true }), "required with bootstrap"},
		{"auditor no dashboard", auditor(func(c *Auditor) { c.Dashboard = "" }), ""},
		{"auditor bad dashboard", auditor(func(c *Auditor) { c.Dashboard = "7800" }), "dashboard: \"7800\" is not host:port"},
		{"auditor bad peer", auditor(func(c *Auditor) { c.Peers = []string{"127.0.0.1:7500"} }), "is not id=host:port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("valid config rejected: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to mention %q", err, tc.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error is not ErrInvalid: %v", err)
			}
		})
	}
}

// Validator is the interface the cli loader requires.
type Validator interface{ Validate() error }

func TestValidationListsEveryProblem(t *testing.T) {
	err := Teacher{}.Validate()
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) < 5 {
		t.Fatalf("empty teacher config: want many problems, got %v", err)
	}
}

// testAuditorKey is a valid checkpoint verifier key of auditor a1.
const testAuditorKey = "a1+f853fd16+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"

// A key pasted where its path belongs is refused, and the error does not
// repeat it (before, "open -----BEGIN PRIVATE KEY-----…: no such file"
// printed the whole key).
func TestInlineKeysAreRefusedUnechoed(t *testing.T) {
	const pem = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIKeysKeysKeysKeysKeysKeysKeysKeysKeysKeysKey\n-----END PRIVATE KEY-----\n"
	const age = "AGE-SECRET-KEY-1QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ"
	for _, tc := range []struct {
		name, secret string
		err          error
	}{
		{"teacher tls key", pem, teacherWith(func(c *Teacher) { c.TLS.Key = pem }).Validate()},
		{"teacher age identity", age, teacherWith(func(c *Teacher) { c.AgeIdentity = age }).Validate()},
		{"teacher signing key", pem, teacherWith(func(c *Teacher) { c.SigningKey = pem }).Validate()},
		{"aggregator signing key", pem, aggWith(func(c *Aggregator) { c.SigningKey = pem }).Validate()},
		{"aggregator age identity", strings.ToLower(age), aggWith(func(c *Aggregator) { c.AgeIdentity = strings.ToLower(age) }).Validate()},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), "looks like a key itself") {
			t.Errorf("%s: %v, want a refusal", tc.name, tc.err)
			continue
		}
		if strings.Contains(tc.err.Error(), tc.secret[10:30]) {
			t.Errorf("%s: the error repeats the key: %v", tc.name, tc.err)
		}
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"", 0, true},
		{"0", 0, true},
		{"1048576", 1 << 20, true},
		{"512MiB", 512 << 20, true},
		{"1 GiB", 1 << 30, true},
		{"64KiB", 64 << 10, true},
		{"100B", 100, true},
		{"1GB", 0, false}, // decimal units are not accepted: say GiB
		{"-1MiB", 0, false},
		{"lots", 0, false},
		{"9999999999GiB", 0, false}, // overflows
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err == nil) != tt.ok || got != tt.want || (err != nil && !errors.Is(err, ErrSize)) {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

// Every service has a memory bound by default, and a bad one is reported
// under its key.
func TestMemoryLimit(t *testing.T) {
	for name, ops := range map[string]Ops{"aggregator": DefaultAggregator().Ops, "teacher": DefaultTeacher().Ops, "auditor": DefaultAuditor().Ops} {
		if n, err := ParseSize(ops.MemoryLimit); err != nil || n == 0 {
			t.Errorf("%s: default memory limit %q (%v), want a bound", name, ops.MemoryLimit, err)
		}
	}
	a := DefaultAggregator()
	a.Ops.MemoryLimit = "a lot"
	if err := a.Validate(); err == nil || !strings.Contains(err.Error(), "ops.memory_limit") {
		t.Fatalf("Validate: %v, want an error naming ops.memory_limit", err)
	}
}
