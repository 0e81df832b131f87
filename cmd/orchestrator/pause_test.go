package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPauseCommandLine: pause and resume take exactly one of -all, -phase
// and -batch, so that no slip pauses everything; pauses takes none.
func TestPauseCommandLine(t *testing.T) {
	t.Parallel()
	env := func(k string) (string, bool) {
		if k == "ADMIN_TOKEN" {
			return "an-admin-token-of-the-test", true
		}
		return "", false
	}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"pause", nil, "pause takes one of -all, -phase PHASE and -batch ID"},
		{"pause", []string{"-all", "-phase", "OCR"}, "pause takes one of -all, -phase PHASE and -batch ID"},
		{"resume", []string{"-phase", "OCR", "-batch", "B"}, "resume takes one of -all, -phase PHASE and -batch ID"},
		{"resume", []string{"-all", "-reason", "x"}, "-reason is for pause"},
		{"pauses", []string{"-all"}, "pauses takes no -all, -phase or -batch"},
		{"pause", []string{"-all", "extra"}, "pause takes no arguments"},
	} {
		var stdout, stderr bytes.Buffer
		err := runPause(context.Background(), tt.name, tt.args, env, &stdout, &stderr)
		var ue usageError
		require.ErrorAs(t, err, &ue, "%s %v", tt.name, tt.args)
		require.Equal(t, tt.want, ue.msg, "%s %v", tt.name, tt.args)
	}
}
