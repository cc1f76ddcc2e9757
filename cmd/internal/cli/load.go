// Package cli is what every NZC binary shares: configuration loading (the
// only importer of viper), output formats, logging and the version command.
//
// Configuration comes from four layers, highest precedence first:
//
//	flags            --tls-cert /etc/nzc/hospital-1.crt
//	environment      NZC_TLS_CERT=/etc/nzc/hospital-1.crt   (dots and dashes become underscores)
//	YAML file        --config federation/hospital-1.yaml, key tls: {cert: /etc/nzc/hospital-1.crt}
//	defaults         the binary's Default* config
//
// and is decoded exactly into a typed struct: a key in the file that the
// struct does not have is an error naming the key, its line and the file.
package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"gopkg.in/yaml.v3"
)

// EnvPrefix is the prefix of every configuration environment variable.
const EnvPrefix = "NZC"

// ConfigFlag is the name of the flag that names the YAML file.
const ConfigFlag = "config"

// Errors returned by Load.
var (
	// ErrUnknownKey reports a key in a configuration file that the binary
	// does not have (usually a typo).
	ErrUnknownKey = errors.New("unknown configuration key")
	// ErrConfigFile reports a configuration file that cannot be read or parsed.
	ErrConfigFile = errors.New("cannot read configuration file")
)

// UnknownKeyError names a key in a configuration file that the typed
// configuration does not have.
type UnknownKeyError struct {
	File    string
	Key     string
	Line    int
	Suggest string // a known key with a similar name, if any
}

func (e *UnknownKeyError) Error() string {
	msg := fmt.Sprintf("%s:%d: unknown configuration key %q", e.File, e.Line, e.Key)
	if e.Suggest != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", e.Suggest)
	}
	return msg + "; remove it or fix its name (`--help` lists every key as a flag)"
}

// Is matches ErrUnknownKey.
func (e *UnknownKeyError) Is(target error) bool { return target == ErrUnknownKey }

// Validator is a configuration that can check itself.
type Validator interface {
	Validate() error
}

// Load fills a configuration for cmd from its flags, the NZC_* environment,
// the YAML file named by --config and the defaults, in that order of
// precedence, then validates it. A flag whose name is a key with dots and
// underscores replaced by dashes (tls.cert → --tls-cert) sets that key.
func Load[T Validator](cmd *cobra.Command, defaults T) (T, error) {
	var zero T
	flags := cmd.Flags()
	keys := keysOf(reflect.TypeOf(defaults))
	v := viper.New()
	v.SetConfigType("yaml")
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_", "-", "_"))

	dv := reflect.ValueOf(defaults)
	for _, k := range keys {
		v.SetDefault(k.name, dv.FieldByIndex(k.index).Interface())
		if err := v.BindEnv(k.name); err != nil {
			return zero, err
		}
		if f := flags.Lookup(FlagName(k.name)); f != nil {
			if err := v.BindPFlag(k.name, f); err != nil {
				return zero, err
			}
		}
	}

	var path string
	var data []byte
	if f := flags.Lookup(ConfigFlag); f != nil && f.Value.String() != "" {
		path = f.Value.String()
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return zero, fmt.Errorf("%w %s: %v; check the path given to --%s", ErrConfigFile, path, err, ConfigFlag)
		}
		if err := checkFileKeys(path, data, keys); err != nil {
			return zero, err
		}
		if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
			return zero, fmt.Errorf("%w %s: %v", ErrConfigFile, path, err)
		}
	}

	for _, name := range unknownEnv(os.Environ(), keys) {
		fmt.Fprintf(cmd.ErrOrStderr(), "%s: warning: %s sets no configuration key and is ignored; '%s config keys' lists the keys and their NZC_* variables\n",
			cmd.Root().Name(), name, cmd.Root().Name())
	}

	var cfg T
	if err := v.UnmarshalExact(&cfg); err != nil {
		return zero, &BadValueError{Err: err, Where: badValueSources(err, keys, cmd, path, data)}
	}
	if err := cfg.Validate(); err != nil {
		return zero, err
	}
	return cfg, nil
}

// otherEnv tells whether name is an NZC_* variable read by something other
// than a configuration: nzc ledger's checkpoint directory, the tests' ONNX
// Runtime and logs.
func otherEnv(name string) bool {
	switch name {
	case "NZC_CHECKPOINTS", "NZC_ONNXRUNTIME", "NZC_REQUIRE_ONNX", "NZC_TEST_LOG":
		return true
	}
	return false
}

// unknownEnv returns the NZC_* variables of environ (KEY=VALUE) that set
// none of keys, such as a misspelled NZC_AGGREGATR, sorted.
func unknownEnv(environ []string, keys []key) []string {
	known := map[string]bool{}
	for _, k := range keys {
		known[EnvName(k.name)] = true
	}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, EnvPrefix+"_") && !known[name] && !otherEnv(name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// BadValueError reports a value that cannot be decoded into its key's type.
type BadValueError struct {
	Err error
	// Where names where each key the error names was set: FILE:LINE, an
	// NZC_* variable or a flag.
	Where []string
}

func (e *BadValueError) Error() string {
	msg := "a configuration value has the wrong type (numbers, durations such as 30s, true/false)"
	if len(e.Where) > 0 {
		msg += " at " + strings.Join(e.Where, ", ")
	}
	return msg + ": " + e.Err.Error()
}

// badValueSources names where each key that err quotes was set: the
// flag, the NZC_* variable or the line of the file, in that order of
// precedence, as Load reads them.
func badValueSources(err error, keys []key, cmd *cobra.Command, path string, data []byte) []string {
	lines := map[string]int{}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) == nil && len(doc.Content) > 0 {
		var walk func(prefix string, n *yaml.Node)
		walk = func(prefix string, n *yaml.Node) {
			for i := 0; i+1 < len(n.Content); i += 2 {
				full := n.Content[i].Value
				if prefix != "" {
					full = prefix + "." + full
				}
				lines[full] = n.Content[i].Line
				if n.Content[i+1].Kind == yaml.MappingNode {
					walk(full, n.Content[i+1])
				}
			}
		}
		walk("", doc.Content[0])
	}
	var out []string
	for _, k := range keys {
		if !strings.Contains(err.Error(), "'"+k.name+"'") {
			continue
		}
		if f := cmd.Flags().Lookup(FlagName(k.name)); f != nil && f.Changed {
			out = append(out, "flag --"+f.Name)
		} else if _, ok := os.LookupEnv(EnvName(k.name)); ok {
			out = append(out, "environment "+EnvName(k.name))
		} else if line, ok := lines[k.name]; ok {
			out = append(out, fmt.Sprintf("%s:%d (%s)", path, line, k.name))
		}
	}
	return out
}

func (e *BadValueError) Unwrap() error { return e.Err }

// FlagName returns the flag that sets a configuration key.
func FlagName(key string) string {
	return strings.NewReplacer(".", "-", "_", "-").Replace(key)
}

// EnvName returns the environment variable that sets a configuration key.
func EnvName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(key))
}

type key struct {
	name  string
	index []int // field index path in the config struct
}

// keysOf lists the dotted keys of a config struct type, from mapstructure tags.
func keysOf(t reflect.Type) []key {
	var out []key
	var walk func(prefix string, index []int, t reflect.Type)
	walk = func(prefix string, index []int, t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name := f.Tag.Get("mapstructure")
			if name == "-" {
				continue // not a configuration key
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			full := name
			if prefix != "" {
				full = prefix + "." + name
			}
			idx := append(slices.Clone(index), i)
			if f.Type.Kind() == reflect.Struct {
				walk(full, idx, f.Type)
				continue
			}
			out = append(out, key{name: full, index: idx})
		}
	}
	walk("", nil, t)
	return out
}

// checkFileKeys reports the first key in a YAML document that is not a
// configuration key, with its line.
func checkFileKeys(path string, data []byte, keys []key) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%w %s: %v", ErrConfigFile, path, err)
	}
	if len(doc.Content) == 0 {
		return nil // empty file
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("%w %s: the top level must be a mapping of keys to values", ErrConfigFile, path)
	}
	known := map[string]bool{}
	prefixes := map[string]bool{}
	var names []string
	for _, k := range keys {
		known[k.name] = true
		names = append(names, k.name)
		parts := strings.Split(k.name, ".")
		for i := 1; i < len(parts); i++ {
			prefixes[strings.Join(parts[:i], ".")] = true
		}
	}
	var walk func(prefix string, n *yaml.Node) error
	walk = func(prefix string, n *yaml.Node) error {
		for i := 0; i+1 < len(n.Content); i += 2 {
			kn, vn := n.Content[i], n.Content[i+1]
			full := kn.Value
			if prefix != "" {
				full = prefix + "." + kn.Value
			}
			if _, ok := known[full]; ok {
				continue
			}
			if prefixes[full] {
				if vn.Kind != yaml.MappingNode {
					return fmt.Errorf("%w %s:%d: %q is a section; give it keys such as %s", ErrConfigFile, path, kn.Line, full, firstUnder(names, full))
				}
				if err := walk(full, vn); err != nil {
					return err
				}
				continue
			}
			return &UnknownKeyError{File: path, Key: full, Line: kn.Line, Suggest: closest(full, names)}
		}
		return nil
	}
	return walk("", root)
}

func firstUnder(names []string, prefix string) string {
	for _, n := range names {
		if strings.HasPrefix(n, prefix+".") {
			return n
		}
	}
	return prefix
}

// closest returns the known key nearest to k by edit distance, if near.
func closest(k string, names []string) string {
	best, bestD := "", len(k)/2+2
	for _, n := range names {
		if d := editDistance(k, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Configured makes cmd a command that reads its configuration: it adds the
// configuration flags of defaults and sets RunE to load the configuration,
// then call run. Other flags may be added to cmd before or after.
func Configured[T Validator](cmd *cobra.Command, defaults T, run func(cmd *cobra.Command, cfg T) error) *cobra.Command {
	AddConfigFlags(cmd, defaults)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := Load(cmd, defaults)
		if err != nil {
			return err
		}
		return run(cmd, cfg)
	}
	return cmd
}

// Formatted makes cmd a command that reads its configuration and prints in
// the format chosen with --format: it adds the configuration flags of
// defaults and the --format flag, and sets RunE to check the format before
// any configuration is read, load the configuration, then call run. Other
// flags may be added to cmd before or after.
func Formatted[T Validator](cmd *cobra.Command, defaults T, run func(cmd *cobra.Command, format string, cfg T) error) *cobra.Command {
	AddConfigFlags(cmd, defaults)
	return WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		cfg, err := Load(cmd, defaults)
		if err != nil {
			return err
		}
		return run(cmd, f, cfg)
	})
}
