package jobs

import (
	"context"
	"io"

	"github.com/arke-institute/orchestrator/db"
)

// FinalManifest is the final manifest as delivered (spoolManifest read
// back), for tests.
func FinalManifest(ctx context.Context, conn db.DBTX, batchID string, generation int32, failures Failures) ([]byte, error) {
	s, err := spoolManifest(ctx, conn, batchID, generation, failures)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return io.ReadAll(s.reader())
}
