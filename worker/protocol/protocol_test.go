package protocol_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/worker/protocol"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, header string
		want         int
		err          string
	}{
		{name: "MissingIsV1", header: "", want: protocol.V1},
		{name: "V1", header: "1", want: protocol.V1},
		{name: "Current", header: " 2 ", want: protocol.Current},
		{name: "Newer", header: "3", err: "worker protocol 3 is newer than this orchestrator's (1-2)"},
		{name: "Zero", header: "0", err: `worker protocol "0" is not a version`},
		{name: "NotANumber", header: "two", err: `worker protocol "two" is not a version`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := protocol.Check(tc.header)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
