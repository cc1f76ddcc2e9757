//go:build !nzctest

package pause

import (
	"context"
	"log/slog"
)

// Enabled says whether this build has the test hook.
const Enabled = false

// Hook is nil in a build without the nzctest tag: nothing pauses, whatever
// the environment says.
func Hook(*slog.Logger) func(ctx context.Context, point string) { return nil }
