// Package locals3 runs a real S3 server inside the process: versitygw's
// embedded gateway on its posix backend, keeping objects as plain files in a
// folder. The orchestrator uses it when no R2 settings are given (the
// embedded default of `make run`), and tests use it through s3test. It checks
// SigV4 signatures and supports conditional writes like R2, so the same
// client code runs against it as against production.
//
// Two constraints come from versitygw and shape the API:
//   - one gateway per process (package-level state inside versitygw);
//   - the posix backend resolves buckets relative to the working directory,
//     so starting it changes the whole process's working directory to the
//     data folder (os.Chdir), for good. Start therefore takes an absolute
//     folder, and callers must not rely on relative paths afterwards.
package locals3

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/backend/meta"
	"github.com/versity/versitygw/backend/posix"
	"github.com/versity/versitygw/embedgw"
	"github.com/versity/versitygw/s3api"

	"github.com/arke-institute/orchestrator/blob"
)

// startTimeout bounds how long Start waits for the server to answer.
const startTimeout = 30 * time.Second

// Options configure the server.
type Options struct {
	// Dir holds the server's data: Dir/data has one folder per bucket with
	// objects as files; Dir/meta has their metadata. Made absolute by Start.
	Dir string
	// Addr is host:port to listen on; a port of 0 picks a free one.
	Addr string
	// AccessKey and SecretKey are the one account the server accepts.
	AccessKey string
	SecretKey string
}

// Server is a running local S3 server.
type Server struct {
	// Endpoint is the server's base URL, http://HOST:PORT.
	Endpoint string
	// DataDir is the folder holding one subfolder per bucket.
	DataDir   string
	accessKey string
	secretKey string
	stopped   chan struct{}
}

// Stopped is closed once the server has stopped after its context ended:
// only then may another start in this process.
func (s *Server) Stopped() <-chan struct{} { return s.stopped }

// Config is the blob configuration for this server, as if R2_ENDPOINT,
// R2_ACCESS_KEY_ID and R2_SECRET_ACCESS_KEY pointed at it.
func (s *Server) Config() blob.S3Config {
	return blob.S3Config{
		Endpoint:        s.Endpoint,
		AccessKeyID:     s.accessKey,
		SecretAccessKey: s.secretKey,
		Region:          blob.DefaultRegion,
	}
}

// Start runs the gateway until ctx ends and returns once it answers signed
// requests. Only one may run per process.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.AccessKey == "" || opts.SecretKey == "" {
		return nil, errors.New("local S3: an access key and a secret key are required")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("local S3: resolving %s: %w", opts.Dir, err)
	}
	// The sidecar metadata store keeps ETags and content types in files of
	// its own, where the default (extended attributes) depends on the
	// filesystem supporting user xattrs. It must live outside the data root.
	data, metaDir := filepath.Join(dir, "data"), filepath.Join(dir, "meta")
	for _, d := range []string{data, metaDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("local S3: %w", err)
		}
	}
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if host, port, err := net.SplitHostPort(addr); err == nil && port == "0" {
		if addr, err = freeAddr(host); err != nil {
			return nil, fmt.Errorf("local S3: %w", err)
		}
	}

	ms, err := meta.NewSideCar(metaDir)
	if err != nil {
		return nil, fmt.Errorf("local S3: sidecar metadata: %w", err)
	}
	be, err := posix.New(data, ms, posix.PosixOpts{
		// Zero would refuse every CopyObject; 5 GiB is S3's own limit.
		CopyObjectThreshold: 5 << 30,
	})
	if err != nil {
		return nil, fmt.Errorf("local S3: posix backend: %w", err)
	}

	listening := make(chan struct{})
	cfg := &embedgw.Config{
		RootUserAccess:    opts.AccessKey,
		RootUserSecret:    opts.SecretKey,
		Region:            blob.DefaultRegion,
		Ports:             []string{addr},
		MaxConnections:    1024,
		MaxRequests:       1024,
		MultipartMaxParts: 10000,
		Quiet:             true,
		KeepAlive:         true,
		// The root account alone, passed in rather than left for the
		// gateway to pick, because picking it prints a line to stdout.
		IAMService: auth.NewIAMServiceSingle(auth.Account{
			Access: opts.AccessKey,
			Secret: opts.SecretKey,
			Role:   auth.RoleAdmin,
		}),
		S3Options: []s3api.Option{
			s3api.WithOnListen(func() { close(listening) }),
		},
	}
	done := make(chan error, 1)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		done <- embedgw.RunVersityGW(ctx, be, cfg)
	}()

	timeout := time.NewTimer(startTimeout)
	defer timeout.Stop()
	select {
	case <-listening:
	case err := <-done:
		return nil, fmt.Errorf("local S3 on %s stopped: %w", addr, err)
	case <-timeout.C:
		return nil, fmt.Errorf("local S3 did not listen on %s within %s", addr, startTimeout)
	}

	s := &Server{Endpoint: "http://" + addr, DataDir: data, accessKey: opts.AccessKey, secretKey: opts.SecretKey, stopped: stopped}
	store, err := blob.NewS3(s.Config())
	if err != nil {
		return nil, err
	}
	// Listening is not serving: poll a signed request until the server
	// answers it. A missing object in a missing bucket is a plain "no".
	readyCtx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := store.Exists(readyCtx, "locals3-readiness", "probe")
		if err == nil {
			return s, nil
		}
		select {
		case err := <-done:
			return nil, fmt.Errorf("local S3 on %s stopped: %w", addr, err)
		case <-readyCtx.Done():
			return nil, fmt.Errorf("local S3 on %s did not answer within %s: %w", addr, startTimeout, err)
		case <-tick.C:
		}
	}
}

// freeAddr returns an address on host with a port that was free just now.
func freeAddr(host string) (string, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
