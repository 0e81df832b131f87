package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/arke-institute/orchestrator/internal/fakes/fakeai"
	"github.com/arke-institute/orchestrator/internal/fakes/fakeocr"
)

// providerKey is the API key of `chaos provider`'s fakes.
const providerKey = "chaos-provider-key"

// providerRetryAfter is the Retry-After of the fakes' 429s, in seconds.
const providerRetryAfter = "2"

// providerOutage is an outage of the providers: until mid, every request
// is answered 429 with Retry-After, then until end 503. An outage set to
// begin with the next request waits, pending, for it.
type providerOutage struct {
	mu       sync.Mutex
	mid, end time.Time
	pending  time.Duration
}

// set starts an outage of d, its first half 429s, its second half 503s:
// now, or with the next request if next.
func (o *providerOutage) set(d time.Duration, next bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pending = 0
	if next {
		o.pending, o.mid, o.end = d, time.Time{}, time.Time{}
		return
	}
	now := time.Now()
	o.mid, o.end = now.Add(d/2), now.Add(d)
}

// status is what to answer a request now: 429, 503, or 0 outside an
// outage.
func (o *providerOutage) status() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	if o.pending > 0 {
		o.mid, o.end, o.pending = now.Add(o.pending/2), now.Add(o.pending), 0
	}
	switch {
	case now.Before(o.mid):
		return http.StatusTooManyRequests
	case now.Before(o.end):
		return http.StatusServiceUnavailable
	}
	return 0
}

// providerReport is GET /report of `chaos provider`: each fake's counts.
type providerReport struct {
	OCR fakeocr.Counts `json:"ocr"`
	AI  fakeai.Counts  `json:"ai"`
}

// runProvider is `chaos provider`: the fake providers the orchestrators'
// OCR and documents phases call, as a process of its own that outlives the
// orchestrators the driver kills and is shared by both: the OCR provider
// (internal/fakes/fakeocr) and the embeddings and tags provider
// (internal/fakes/fakeai), each on its own port (both speak
// /v1/chat/completions). POST /fail?seconds=N of the control listener
// starts an outage of both: 429 with Retry-After for its first half, 503
// for its second; with &from=next it starts, for each fake, with the next
// request it gets, so that it meets both the OCR and the documents work
// however little of it there is. GET /report says what the fakes answered. It prints one
// JSON line, {"url" (OCR), "ai", "control"}, once it serves, and runs until
// killed.
func runProvider(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("provider", flag.ContinueOnError)
	control := fs.String("control", "127.0.0.1:0", "control listen address (POST /fail?seconds=30[&from=next])")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// Each fake has its outage: one that waits for the next request
	// begins, for each, with its own.
	var ocrOutage, aiOutage providerOutage
	fail := func(o *providerOutage) (status int, retryAfter string) {
		status = o.status()
		if status == http.StatusTooManyRequests {
			retryAfter = providerRetryAfter
		}
		return status, retryAfter
	}
	ocrFake := fakeocr.New(childTB{}, fakeocr.Options{Key: providerKey, ImageLimit: 1, Behave: func(fakeocr.Request) fakeocr.Behavior {
		status, ra := fail(&ocrOutage)
		return fakeocr.Behavior{Status: status, RetryAfter: ra, Message: "chaos: injected provider outage"}
	}})
	aiFake := fakeai.New(childTB{}, fakeai.Options{Key: providerKey, Behave: func(fakeai.Request) fakeai.Behavior {
		status, ra := fail(&aiOutage)
		return fakeai.Behavior{Status: status, RetryAfter: ra, Message: "chaos: injected provider outage"}
	}})
	cln, err := net.Listen("tcp", *control)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /fail", func(w http.ResponseWriter, r *http.Request) {
		secs, err := strconv.ParseFloat(r.URL.Query().Get("seconds"), 64)
		if err != nil || secs <= 0 {
			http.Error(w, "want ?seconds=N (N > 0)", http.StatusBadRequest)
			return
		}
		d, next := time.Duration(secs*float64(time.Second)), r.URL.Query().Get("from") == "next"
		ocrOutage.set(d, next)
		aiOutage.set(d, next)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /report", func(w http.ResponseWriter, _ *http.Request) {
		body, _ := json.Marshal(providerReport{OCR: ocrFake.Counts(), AI: aiFake.Counts()})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
	go http.Serve(cln, mux) //nolint:errcheck // runs until the process ends
	line, _ := json.Marshal(map[string]string{"url": ocrFake.URL, "ai": aiFake.URL, "control": "http://" + cln.Addr().String()})
	fmt.Fprintln(stdout, string(line))
	<-ctx.Done()
	return nil
}
