package cli

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/federation/config"
)

// loadAs loads a configuration file as one of the binaries' typed
// configurations, chosen by which.
func loadAs(t *testing.T, which byte, path string) error {
	load := func(defaults Validator, do func(*cobra.Command) error) error {
		cmd := &cobra.Command{Use: "x"}
		AddConfigFlags(cmd, defaults)
		if err := cmd.ParseFlags([]string{"--" + ConfigFlag, path}); err != nil {
			t.Fatal(err)
		}
		return do(cmd)
	}
	switch which % 4 {
	case 0:
		return load(config.DefaultTeacher(), func(c *cobra.Command) error { _, err := Load(c, config.DefaultTeacher()); return err })
	case 1:
		return load(config.DefaultAggregator(), func(c *cobra.Command) error { _, err := Load(c, config.DefaultAggregator()); return err })
	case 2:
		return load(config.DefaultStudent(), func(c *cobra.Command) error { _, err := Load(c, config.DefaultStudent()); return err })
	default:
		return load(config.DefaultAuditor(), func(c *cobra.Command) error { _, err := Load(c, config.DefaultAuditor()); return err })
	}
}

// FuzzLoadConfig feeds arbitrary YAML files to every binary's configuration
// loader. Whatever the file holds, Load either returns a configuration that
// validated or one of its typed errors; it never panics or fails untyped.
func FuzzLoadConfig(f *testing.F) {
	for i, name := range []string{"teacher", "aggregator", "student", "auditor"} {
		b, err := os.ReadFile(filepath.Join("testdata", name+".yaml"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(byte(i), b)
	}
	f.Add(byte(0), []byte("id: h1\nnmae: x\n"))
	f.Add(byte(1), []byte("mechanism: 3\n"))
	f.Add(byte(1), []byte("mechanism: {sigma: .nan, name: gnmax}\nquorum: -1\n"))
	f.Add(byte(2), []byte("batch_size: many\n"))
	f.Add(byte(3), []byte("a: &a [*a, *a]\nb: *a\n"))
	f.Add(byte(3), []byte("- [unclosed\n"))
	f.Add(byte(0), []byte("tls: {ca: {x: 1}}\n"))
	// One file per fuzzing process, rewritten for each input: a new
	// directory per input would make file-system work the bulk of the run.
	path := filepath.Join(f.TempDir(), "c.yaml")
	f.Fuzz(func(t *testing.T, which byte, file []byte) {
		if err := os.WriteFile(path, file, 0o600); err != nil {
			t.Fatal(err)
		}
		err := loadAs(t, which, path)
		var bad *BadValueError
		if err != nil && !errors.Is(err, ErrConfigFile) && !errors.Is(err, ErrUnknownKey) &&
			!errors.As(err, &bad) && !errors.Is(err, config.ErrInvalid) {
			t.Fatalf("untyped error %T: %v", err, err)
		}
	})
}

// The seed files are each binary's working configuration, so that the
// fuzzer starts from files that load.
func TestConfigSeedsLoad(t *testing.T) {
	for i, name := range []string{"teacher", "aggregator", "student", "auditor"} {
		if err := loadAs(t, byte(i), filepath.Join("testdata", name+".yaml")); err != nil {
			t.Errorf("testdata/%s.yaml: %v", name, err)
		}
	}
}
