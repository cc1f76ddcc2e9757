package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/federation/config"
)

// Version is the release of the NZC binaries.
const Version = "0.1.0-dev"

// Formats accepted by --format.
const (
	FormatText = "text"
	FormatJSON = "json"
)

// ErrBadFormat reports an unknown --format value.
var ErrBadFormat = errors.New("unknown output format: use --format text or --format json")

// WithFormat adds --format text|json to a read command and sets its RunE:
// the format is checked before anything else runs, then run is called with
// it. Other flags may be added to cmd before or after.
func WithFormat(cmd *cobra.Command, run func(cmd *cobra.Command, args []string, format string) error) *cobra.Command {
	f := cmd.Flags().String("format", FormatText, "output format: text or json")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		switch *f {
		case FormatText, FormatJSON:
			return run(cmd, args, *f)
		}
		return fmt.Errorf("%w (got %q)", ErrBadFormat, *f)
	}
	return cmd
}

// Print writes v as indented JSON when format is json, and otherwise calls
// text to write the human form.
func Print(w io.Writer, format string, v any, text func(io.Writer) error) error {
	if format == FormatJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	return text(w)
}

// Textf is Print's text form of a result told in one formatted message.
func Textf(format string, args ...any) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := fmt.Fprintf(w, format, args...)
		return err
	}
}

// Text is Print's text form of a result built line by line: build writes
// it to a buffer, written out at once.
func Text(build func(b *strings.Builder)) func(io.Writer) error {
	return func(w io.Writer) error {
		var b strings.Builder
		build(&b)
		_, err := io.WriteString(w, b.String())
		return err
	}
}

// AddConfigFlag adds --config to a command that loads a configuration.
func AddConfigFlag(cmd *cobra.Command) {
	cmd.Flags().String(ConfigFlag, "", "YAML configuration file (keys as listed by 'config keys'; flags and NZC_* variables override it)")
}

// NewLogger returns a structured logger writing to w at the configured level
// and format.
func NewLogger(w io.Writer, c config.Log) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level)) // validated already; info on error
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == FormatJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// BuildInfo describes the running binary.
type BuildInfo struct {
	Binary    string `json:"binary"`
	Version   string `json:"version"`
	Revision  string `json:"revision,omitempty"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

// Build returns the build information of the running binary.
func Build(binary string) BuildInfo {
	bi := BuildInfo{Binary: binary, Version: Version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				bi.Revision = s.Value
			}
		}
	}
	return bi
}

// VersionCommand returns the `version` command of a binary.
func VersionCommand(binary string) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "version",
		Short:   "Print the version of " + binary,
		Args:    cobra.NoArgs,
		Example: "  " + binary + " version\n  " + binary + " version --format json",
	}
	return WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		bi := Build(binary)
		return Print(cmd.OutOrStdout(), f, bi, func(w io.Writer) error {
			rev := ""
			if bi.Revision != "" {
				rev = " " + bi.Revision
			}
			_, err := fmt.Fprintf(w, "%s %s%s (%s, %s)\n", bi.Binary, bi.Version, rev, bi.GoVersion, bi.Platform)
			return err
		})
	})
}

// Main runs a command tree with a context cancelled by SIGINT or SIGTERM,
// prints an error on stderr, and returns the process exit code.
func Main(root *cobra.Command, args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root.SetArgs(args)
	root.SilenceUsage = true
	root.SilenceErrors = true
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(root.ErrOrStderr(), "%s: %v\n", root.Name(), err)
		return 1
	}
	return 0
}

// Exec is a binary's main: it runs the command tree root on the process's
// arguments (Main) and exits with its code.
func Exec(root *cobra.Command) { os.Exit(Main(root, os.Args[1:])) }
