package cli

import (
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
)

// AddConfigFlags adds --config and one flag for every key of the
// configuration type (tls.cert → --tls-cert), with the key's default and the
// help text of its `help` tag. Load binds them.
func AddConfigFlags(cmd *cobra.Command, defaults any) {
	AddConfigFlag(cmd)
	dv := reflect.ValueOf(defaults)
	t := dv.Type()
	for _, k := range keysOf(t) {
		f := t.FieldByIndex(k.index)
		usage := f.Tag.Get("help")
		if usage == "" {
			usage = k.name
		}
		usage += " (env " + EnvName(k.name) + ")"
		name := FlagName(k.name)
		fs := cmd.Flags()
		fv := dv.FieldByIndex(k.index)
		if fv.Kind() == reflect.String && fv.Type() != reflect.TypeFor[string]() {
			fs.String(name, fv.String(), usage) // a named string type, e.g. mechanism.Kind
			continue
		}
		switch val := fv.Interface().(type) {
		case string:
			fs.String(name, val, usage)
		case int:
			fs.Int(name, val, usage)
		case uint64:
			fs.Uint64(name, val, usage)
		case bool:
			fs.Bool(name, val, usage)
		case float64:
			fs.Float64(name, val, usage)
		case time.Duration:
			fs.Duration(name, val, usage)
		case []string:
			fs.StringSlice(name, val, usage)
		default:
			panic(fmt.Sprintf("cli: no flag type for config key %s (%T)", k.name, val))
		}
	}
}

// ConfigCommand returns `config`, which shows the effective configuration of
// a binary (after flags, environment, file and defaults, validated) and lists
// its keys.
func ConfigCommand[T Validator](binary string, defaults T) *cobra.Command {
	parent := &cobra.Command{
		Use:   "config",
		Short: "Show the effective configuration, or list the configuration keys",
		Long: `Configuration comes from flags, then NZC_* environment variables, then the
YAML file given with --config, then defaults. Unknown keys in the file are errors.`,
	}
	show := &cobra.Command{
		Use:   "show",
		Short: "Load, validate and print the effective configuration",
		Args:  cobra.NoArgs,
		Example: fmt.Sprintf(`  %[1]s config show --config %[2]s.yaml
  NZC_LOG_LEVEL=debug %[1]s config show --config %[2]s.yaml --format json`, binary, strings.TrimPrefix(binary, "nzc-")),
	}
	AddConfigFlags(show, defaults)
	WithFormat(show, func(cmd *cobra.Command, _ []string, f string) error {
		cfg, err := Load(cmd, defaults)
		if err != nil {
			return err
		}
		return Print(cmd.OutOrStdout(), f, cfg, func(w io.Writer) error {
			enc := yaml.NewEncoder(w)
			enc.SetIndent(2)
			if err := enc.Encode(cfg); err != nil {
				return err
			}
			return enc.Close()
		})
	})
	keys := &cobra.Command{
		Use:     "keys",
		Short:   "List every configuration key with its flag and environment variable",
		Args:    cobra.NoArgs,
		Example: "  " + binary + " config keys\n  " + binary + " config keys --format json",
	}
	WithFormat(keys, func(cmd *cobra.Command, _ []string, f string) error {
		type row struct {
			Key  string `json:"key"`
			Flag string `json:"flag"`
			Env  string `json:"env"`
			Help string `json:"help"`
		}
		var rows []row
		t := reflect.TypeOf(defaults)
		for _, k := range keysOf(t) {
			rows = append(rows, row{k.name, "--" + FlagName(k.name), EnvName(k.name), t.FieldByIndex(k.index).Tag.Get("help")})
		}
		return Print(cmd.OutOrStdout(), f, rows, func(w io.Writer) error {
			for _, r := range rows {
				if _, err := fmt.Fprintf(w, "%-28s %-30s %-32s %s\n", r.Key, r.Flag, r.Env, r.Help); err != nil {
					return err
				}
			}
			return nil
		})
	})
	parent.AddCommand(show, keys)
	return parent
}

// Service is what a party's binary says of itself in its help: its name, a
// line, what it does (a paragraph or two) and examples.
type Service struct {
	Name, Short, About, Example string
}

// ServiceRoot builds the root command of a party's binary: its help (what it
// does, then where its configuration comes from), its own commands, then the
// `version` and `config` commands every binary has, for the configuration
// defaults.
func ServiceRoot[T Validator](s Service, defaults T, cmds ...*cobra.Command) *cobra.Command {
	root := &cobra.Command{
		Use:   s.Name,
		Short: s.Short,
		Long: s.About + `

Its configuration (see '` + s.Name + ` config keys') comes from flags, NZC_*
environment variables and a YAML file made by 'nzc init'.`,
		Example: s.Example,
	}
	root.AddCommand(cmds...)
	root.AddCommand(VersionCommand(s.Name), ConfigCommand(s.Name, defaults))
	return root
}
