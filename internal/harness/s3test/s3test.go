// Package s3test runs a real S3 server inside the test process: versitygw's
// embedded gateway on its posix backend, rooted in a temporary directory. It
// checks SigV4 signatures and supports conditional writes like R2, so tests
// exercise the same client code and error paths production does.
//
// The gateway allows one instance per process, so Start shares one server
// among all tests of a test binary; NewBucket gives each test its own bucket
// so parallel tests stay isolated.
//
// Caveat: versitygw's posix backend resolves buckets relative to the working
// directory, so starting it changes the whole process's working directory to
// the server's root (os.Chdir), and it must stay there. In a package whose
// tests call Start, a relative path (testdata/...) opened after the first
// Start would resolve inside the server root, so resolve such paths once in a
// package-level variable, which runs before any test:
//
//	var testdata, _ = filepath.Abs("testdata")
//
// and never call os.Chdir or t.Chdir there.
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/locals3"
)

// rootPrefix names the server's temporary directories; the process ID
// follows, so a later run can remove the directories of dead processes.
const rootPrefix = "orchestrator-s3test-"

// Server is a process-wide S3 server rooted in a temp dir.
type Server struct {
	endpoint  string
	accessKey string
	secretKey string
	root      string
	store     *blob.S3
}

var (
	once     sync.Once
	server   *Server
	startErr error
	buckets  atomic.Int64
)

// Start returns the process's S3 server, starting it on first use. It waits
// until the server answers a signed request and fails the test if it does
// not.
func Start(tb testing.TB) *Server {
	tb.Helper()
	once.Do(func() { server, startErr = start() })
	if startErr != nil {
		tb.Fatalf("s3test: starting the embedded S3 server (versitygw): %v", startErr)
	}
	return server
}

// Endpoint is the server's base URL, http://127.0.0.1:PORT.
func (s *Server) Endpoint() string { return s.endpoint }

// AccessKey is the access key ID the server accepts.
func (s *Server) AccessKey() string { return s.accessKey }

// SecretKey is the secret key requests must be signed with.
func (s *Server) SecretKey() string { return s.secretKey }

// Root is the directory the server keeps its buckets in (one subdirectory
// per bucket), for tests that want to look at what was stored.
func (s *Server) Root() string { return s.root }

// Config is the blob configuration for this server, as cmd/ would build it
// from R2_ENDPOINT, R2_ACCESS_KEY_ID and R2_SECRET_ACCESS_KEY.
func (s *Server) Config() blob.S3Config {
	return blob.S3Config{
		Endpoint:        s.endpoint,
		AccessKeyID:     s.accessKey,
		SecretAccessKey: s.secretKey,
		Region:          blob.DefaultRegion,
	}
}

// NewBucket creates a fresh bucket named after the test and returns its
// name. Buckets are not removed: they live in the server's temporary root.
func (s *Server) NewBucket(tb testing.TB) string {
	tb.Helper()
	name := bucketName(tb.Name(), buckets.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.store.EnsureBucket(ctx, name); err != nil {
		tb.Fatalf("s3test: creating bucket %s: %v", name, err)
	}
	return name
}

var nonBucketChars = regexp.MustCompile(`[^a-z0-9]+`)

// bucketName makes a valid, unique S3 bucket name (3-63 characters of
// lowercase letters, digits and hyphens) that says which test made it.
func bucketName(testName string, n int64) string {
	suffix := fmt.Sprintf("-%d-%s", n, randomHex(3))
	base := strings.Trim(nonBucketChars.ReplaceAllString(strings.ToLower(testName), "-"), "-")
	if maxLen := 63 - len("t-") - len(suffix); len(base) > maxLen {
		base = strings.TrimRight(base[:maxLen], "-")
	}
	return "t-" + base + suffix
}

// start runs the gateway in the background for the rest of the process.
func start() (*Server, error) {
	removeStaleRoots()
	dir, err := os.MkdirTemp("", rootPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, err
	}
	s := &Server{accessKey: "s3test" + randomHex(7), secretKey: randomHex(20)}
	// Choosing a free port and binding it later leaves a short window in
	// which another process may take it; try again with a new port then.
	var lastErr error
	for range 3 {
		srv, err := locals3.Start(context.Background(), locals3.Options{
			Dir: dir, Addr: "127.0.0.1:0", AccessKey: s.accessKey, SecretKey: s.secretKey,
		})
		if err != nil {
			lastErr = err
			continue
		}
		s.endpoint, s.root = srv.Endpoint, srv.DataDir
		if s.store, err = blob.NewS3(s.Config()); err != nil {
			return nil, err
		}
		return s, nil
	}
	return nil, lastErr
}

// removeStaleRoots deletes the temporary roots of test processes that have
// exited: the server runs until its process ends, so nothing removes its
// root at the time.
func removeStaleRoots() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), rootPrefix+"*"))
	for _, dir := range dirs {
		pidStr, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(dir), rootPrefix), "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(dir)
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
