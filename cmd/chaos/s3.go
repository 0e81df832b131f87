package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/arke-institute/orchestrator/locals3"
)

// faultWindow is an outage that answers status until a time.
type faultWindow struct {
	mu     sync.Mutex
	status int
	until  time.Time
	count  int
}

// set starts an outage of d answering status.
func (f *faultWindow) set(status int, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status, f.until = status, time.Now().Add(d)
	f.count++
}

// active returns the status to answer while an outage lasts.
func (f *faultWindow) active() (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.status == 0 || !time.Now().Before(f.until) {
		return 0, false
	}
	return f.status, true
}

// failHandler is POST /fail?status=503&seconds=30 of a child's control
// listener.
func (f *faultWindow) failHandler(w http.ResponseWriter, r *http.Request) {
	status, err1 := strconv.Atoi(r.URL.Query().Get("status"))
	secs, err2 := strconv.ParseFloat(r.URL.Query().Get("seconds"), 64)
	if err1 != nil || err2 != nil || status < 400 || status > 599 || secs <= 0 {
		http.Error(w, "want ?status=4xx|5xx&seconds=N (N > 0)", http.StatusBadRequest)
		return
	}
	f.set(status, time.Duration(secs*float64(time.Second)))
	w.WriteHeader(http.StatusNoContent)
}

// runS3 is `chaos s3`: the local S3 server (locals3) as a process
// of its own, which outlives the orchestrators the driver kills and is
// shared by two of them. It listens on -addr through a proxy that answers
// 503 (S3's SlowDown) to every request while an outage set on the control
// listener lasts. It prints one JSON line, {"endpoint", "control"}, once it
// serves, and runs until killed.
func runS3(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("s3", flag.ContinueOnError)
	dir := fs.String("dir", "", "data folder (required)")
	addr := fs.String("addr", "127.0.0.1:0", "S3 listen address")
	control := fs.String("control", "127.0.0.1:0", "control listen address (POST /fail?status=503&seconds=30)")
	access := fs.String("access-key", "chaos", "access key")
	secret := fs.String("secret-key", "chaossecret", "secret key")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("s3: -dir is required")
	}
	srv, err := locals3.Start(ctx, locals3.Options{Dir: *dir, Addr: "127.0.0.1:0", AccessKey: *access, SecretKey: *secret})
	if err != nil {
		return err
	}
	target, err := url.Parse(srv.Endpoint)
	if err != nil {
		return err
	}
	faults := &faultWindow{}
	// The Host header is kept (ReverseProxy leaves it), so the signatures
	// made for the proxy's address verify behind it.
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status, ok := faults.active(); ok {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>chaos: injected outage</Message></Error>`)
			return
		}
		proxy.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	cln, err := net.Listen("tcp", *control)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /fail", faults.failHandler)
	go http.Serve(cln, mux)  //nolint:errcheck // runs until the process ends
	go http.Serve(ln, front) //nolint:errcheck // runs until the process ends
	line, _ := json.Marshal(map[string]string{"endpoint": "http://" + ln.Addr().String(), "control": "http://" + cln.Addr().String()})
	fmt.Fprintln(stdout, string(line))
	<-ctx.Done()
	return nil
}
