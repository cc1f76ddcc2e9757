package main

import (
	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/ml/onnx"
	"github.com/nzcfed/nzc/party/teacher"
)

func newONNXCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "onnx",
		Short: "Export a hospital's Go teachers as ONNX models, and check ONNX teachers against the federation",
		Long: `onnx works with teachers in the ONNX format, which nzc-teacher runs when it
is built with -tags onnx and given the ONNX Runtime library
(scripts/fetch-onnxruntime.sh). A models directory with an onnx.json holds
ONNX teachers: {"features": N, "classes": K, "models": ["teacher-1.onnx", …]};
each model takes float32 rows [batch, N] (images channel-last) and returns
[batch, K] scores.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newONNXExportCommand(), newONNXCheckCommand())
	return cmd
}

func newONNXExportCommand() *cobra.Command {
	var models, out string
	cmd := &cobra.Command{
		Use:     "export",
		Short:   "Write the Go teachers of a models directory as ONNX models with their onnx.json",
		Example: `  nzc onnx export --models federation/hospital-1/models --out hospital-1-onnx`,
		Args:    cobra.NoArgs,
	}
	cmd.Flags().StringVar(&models, "models", "models", "models directory written by nzc-teacher train")
	cmd.Flags().StringVar(&out, "out", "", "directory for the ONNX models and onnx.json")
	markRequired(cmd, "out")
	cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		m, err := teacher.ExportONNX(models, out)
		if err != nil {
			return err
		}
		return cli.Print(cmd.OutOrStdout(), f, m, cli.Textf("wrote %d ONNX teachers (%d features, %d classes) and %s to %s\n", len(m.Models), m.Features, m.Classes, teacher.ONNXManifestFile, out))
	})
	return cmd
}

func newONNXCheckCommand() *cobra.Command {
	var (
		model             string
		features, classes int
	)
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check that an ONNX model takes the federation's feature rows and returns one score per class",
		Long: `check reads the inputs and outputs an ONNX model declares, without running it
(no ONNX Runtime needed), and says what differs from one float32 input of
shape [batch, features] and one float32 output of shape [batch, classes].`,
		Example: `  nzc onnx check --model teacher-1.onnx --features 784 --classes 10`,
		Args:    cobra.NoArgs,
	}
	cmd.Flags().StringVar(&model, "model", "", "the ONNX model file")
	cmd.Flags().IntVar(&features, "features", 0, "values in one query row of the federation (e.g. 784 for 28×28 gray images)")
	cmd.Flags().IntVar(&classes, "classes", 0, "classes of the federation")
	markRequired(cmd, "model", "features", "classes")
	cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		if err := onnx.CheckFile(model, features, classes); err != nil {
			return err
		}
		s := struct {
			Model    string `json:"model"`
			Features int    `json:"features"`
			Classes  int    `json:"classes"`
			Runtime  bool   `json:"runtime_in_this_build"`
		}{model, features, classes, onnx.Built}
		return cli.Print(cmd.OutOrStdout(), f, s, cli.Textf("%s fits: [batch, %d] float32 in, [batch, %d] scores out\n", model, features, classes))
	})
	return cmd
}
