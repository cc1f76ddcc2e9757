package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/federation/config"
)

type testConfig struct {
	Name    string        `mapstructure:"name" yaml:"name" help:"a name"`
	Count   int           `mapstructure:"count" yaml:"count"`
	Wait    time.Duration `mapstructure:"wait" yaml:"wait"`
	Peers   []string      `mapstructure:"peers" yaml:"peers"`
	Nested  nested        `mapstructure:"nested" yaml:"nested"`
	Enabled bool          `mapstructure:"enabled" yaml:"enabled"`
}

type nested struct {
	DataDir string  `mapstructure:"data_dir" yaml:"data_dir"`
	Ratio   float64 `mapstructure:"ratio" yaml:"ratio"`
}

func (c testConfig) Validate() error {
	if c.Name == "" {
		return &config.ValidationError{Problems: []config.FieldError{{Key: "name", Problem: "required"}}}
	}
	return nil
}

func defaultTest() testConfig {
	return testConfig{Name: "default", Count: 1, Wait: time.Second, Nested: nested{DataDir: "def", Ratio: 0.5}}
}

// run loads a testConfig through a fresh command with the given file
// content, environment and arguments.
func run(t *testing.T, file string, env map[string]string, args ...string) (testConfig, error) {
	t.Helper()
	cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
	AddConfigFlags(cmd, defaultTest())
	if file != "" {
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", path)
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	return Load(cmd, defaultTest())
}

func TestLoadPrecedence(t *testing.T) {
	const file = "name: file\ncount: 3\nnested:\n  data_dir: /file\n"
	for _, tc := range []struct {
		name     string
		file     string
		env      map[string]string
		args     []string
		wantName string
		wantDir  string
		wantCnt  int
	}{
		{"default only", "", nil, nil, "default", "def", 1},
		{"file over default", file, nil, nil, "file", "/file", 3},
		{"env over file", file, map[string]string{"NZC_NAME": "env", "NZC_NESTED_DATA_DIR": "/env"}, nil, "env", "/env", 3},
		{"flag over env", file, map[string]string{"NZC_NAME": "env", "NZC_NESTED_DATA_DIR": "/env"}, []string{"--name", "flag", "--nested-data-dir", "/flag"}, "flag", "/flag", 3},
		{"flag over file", file, nil, []string{"--count", "9"}, "file", "/file", 9},
		{"env over default", "", map[string]string{"NZC_COUNT": "7"}, nil, "default", "def", 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := run(t, tc.file, tc.env, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != tc.wantName || got.Nested.DataDir != tc.wantDir || got.Count != tc.wantCnt {
				t.Fatalf("got name=%q dir=%q count=%d, want %q %q %d", got.Name, got.Nested.DataDir, got.Count, tc.wantName, tc.wantDir, tc.wantCnt)
			}
		})
	}
}

func TestLoadTypes(t *testing.T) {
	got, err := run(t, "wait: 2m\npeers: [a, b]\nenabled: true\nnested:\n  ratio: 0.25\n", map[string]string{"NZC_PEERS": "x,y,z"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Wait != 2*time.Minute || !got.Enabled || got.Nested.Ratio != 0.25 {
		t.Fatalf("got %+v", got)
	}
	if strings.Join(got.Peers, ",") != "x,y,z" {
		t.Fatalf("env list: got %v", got.Peers)
	}
	got, err = run(t, "", nil, "--peers", "p,q", "--wait", "5s")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got.Peers, ",") != "p,q" || got.Wait != 5*time.Second {
		t.Fatalf("flag list/duration: got %+v", got)
	}
}

func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		file    string
		env     map[string]string
		args    []string
		is      error
		mention []string
	}{
		{"unknown top key", "name: x\nnmae: y\n", nil, nil, ErrUnknownKey, []string{`"nmae"`, "c.yaml:2", `did you mean "name"`}},
		{"unknown nested key", "nested:\n  data_dri: /x\n", nil, nil, ErrUnknownKey, []string{`"nested.data_dri"`, "c.yaml:2", "nested.data_dir"}},
		{"section given a scalar", "nested: 3\n", nil, nil, ErrConfigFile, []string{"section"}},
		{"malformed yaml", "name: [unclosed\n", nil, nil, ErrConfigFile, []string{"c.yaml"}},
		{"top level not a mapping", "- a\n- b\n", nil, nil, ErrConfigFile, []string{"mapping"}},
		{"missing required", "name: \"\"\n", nil, nil, config.ErrInvalid, []string{"name: required"}},
		{"bad number in file", "name: x\ncount: many\n", nil, nil, nil, []string{"wrong type", "c.yaml:2 (count)"}},
		{"bad nested number in file", "nested:\n  data_dir: d\n  ratio: half\n", nil, nil, nil, []string{"wrong type", "c.yaml:3 (nested.ratio)"}},
		{"bad duration in env", "", map[string]string{"NZC_WAIT": "soon"}, nil, nil, []string{"wrong type", "environment NZC_WAIT"}},
		{"missing file", "", nil, []string{"--config", "/nonexistent/nzc.yaml"}, ErrConfigFile, []string{"/nonexistent/nzc.yaml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, tc.file, tc.env, tc.args...)
			if err == nil {
				t.Fatal("no error")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("error %v is not %v", err, tc.is)
			}
			var bv *BadValueError
			if tc.is == nil && !errors.As(err, &bv) {
				t.Fatalf("error %v is not a BadValueError", err)
			}
			for _, m := range tc.mention {
				if !strings.Contains(err.Error(), m) {
					t.Fatalf("error %q does not mention %q", err, m)
				}
			}
		})
	}
}

// Every real binary's configuration must be loadable by Load: all its
// field types have flags, and its defaults plus required values validate.
func TestRealConfigsLoad(t *testing.T) {
	files := map[string]string{
		"teacher":    "id: h1\ntls: {ca: ca.pem, cert: h1.pem, key: h1.key}\nage_identity: h1.age\n",
		"aggregator": "auditors: [127.0.0.1:7600]\nauditor_keys: [a1+f853fd16+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop]\ntls: {ca: ca.pem, cert: a.pem, key: a.key}\nage_identity: a.age\nsigning_key: a.sig\n",
		"student":    "id: s1\ntls: {ca: ca.pem, cert: s.pem, key: s.key}\nage_identity: s.age\nhospitals: [age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p]\nauditor_keys: [a1+f853fd16+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop]\n",
		"auditor":    "id: a1\ntls: {ca: ca.pem, cert: a.pem, key: a.key}\nsigning_key: a.sig\nbootstrap: true\npeers: [a1=127.0.0.1:7500]\n",
	}
	check := func(t *testing.T, name string, load func(*cobra.Command) error, add func(*cobra.Command)) {
		cmd := &cobra.Command{Use: name}
		add(cmd)
		path := filepath.Join(t.TempDir(), name+".yaml")
		if err := os.WriteFile(path, []byte(files[name]), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := cmd.ParseFlags([]string{"--config", path}); err != nil {
			t.Fatal(err)
		}
		if err := load(cmd); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	check(t, "teacher", func(c *cobra.Command) error { _, err := Load(c, config.DefaultTeacher()); return err },
		func(c *cobra.Command) { AddConfigFlags(c, config.DefaultTeacher()) })
	check(t, "aggregator", func(c *cobra.Command) error { _, err := Load(c, config.DefaultAggregator()); return err },
		func(c *cobra.Command) { AddConfigFlags(c, config.DefaultAggregator()) })
	check(t, "student", func(c *cobra.Command) error { _, err := Load(c, config.DefaultStudent()); return err },
		func(c *cobra.Command) { AddConfigFlags(c, config.DefaultStudent()) })
	check(t, "auditor", func(c *cobra.Command) error { _, err := Load(c, config.DefaultAuditor()); return err },
		func(c *cobra.Command) { AddConfigFlags(c, config.DefaultAuditor()) })
}

// A misspelled NZC_* variable is named in a warning, not silently ignored.
func TestLoadWarnsOfUnknownEnv(t *testing.T) {
	t.Setenv("NZC_NAM", "typo")
	t.Setenv("NZC_NAME", "set")
	t.Setenv("NZC_CHECKPOINTS", t.TempDir())
	cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
	var stderr bytes.Buffer
	cmd.SetErr(&stderr)
	AddConfigFlags(cmd, defaultTest())
	c, err := Load(cmd, defaultTest())
	if err != nil || c.Name != "set" {
		t.Fatalf("Load = %+v, %v", c, err)
	}
	if got := stderr.String(); !strings.Contains(got, "NZC_NAM sets no configuration key") || strings.Contains(got, "NZC_NAME ") || strings.Contains(got, "NZC_CHECKPOINTS") {
		t.Fatalf("warnings:\n%s", got)
	}
}
