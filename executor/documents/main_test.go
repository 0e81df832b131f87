package documents_test

import (
	"testing"

	"github.com/arke-institute/orchestrator/internal/harness/testenv"
)

// TestMain runs the test binary as a child orchestrator when a test
// starts it so (testenv.Env.StartChild).
func TestMain(m *testing.M) { testenv.Main(m) }
