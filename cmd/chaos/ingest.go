package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
)

// ingest is the fake ingest service: it records every delivery of a
// finished batch (POST /api/batches/{id}/enqueue-processed) and answers
// 200.
type ingest struct {
	URL   string
	srv   *http.Server
	mu    sync.Mutex
	calls map[string][]delivery // by batch id
}

// delivery is one call ingest received.
type delivery struct {
	IdempotencyKey string
	Files          int
	// Keys, Paths and DocIDs are its files' r2_key, logical_path and
	// document_id (0 if none).
	Keys, Paths []string
	DocIDs      []int64
}

func newIngest() (*ingest, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	in := &ingest{URL: "http://" + ln.Addr().String(), calls: map[string][]delivery{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/batches/{id}/enqueue-processed", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var msg struct {
			Manifest struct {
				Directories []struct {
					Files []struct {
						R2Key       string `json:"r2_key"`
						LogicalPath string `json:"logical_path"`
						DocumentID  int64  `json:"document_id"`
					} `json:"files"`
				} `json:"directories"`
			} `json:"manifest"`
		}
		_ = json.Unmarshal(body, &msg)
		d := delivery{IdempotencyKey: r.Header.Get("Idempotency-Key")}
		for _, dir := range msg.Manifest.Directories {
			for _, f := range dir.Files {
				d.Files++
				d.Keys, d.Paths, d.DocIDs = append(d.Keys, f.R2Key), append(d.Paths, f.LogicalPath), append(d.DocIDs, f.DocumentID)
			}
		}
		in.mu.Lock()
		id := r.PathValue("id")
		in.calls[id] = append(in.calls[id], d)
		in.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok": true}`)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "unexpected "+r.Method+" "+strings.TrimSpace(r.URL.Path), http.StatusNotFound)
	})
	in.srv = &http.Server{Handler: mux}
	go in.srv.Serve(ln) //nolint:errcheck // ends with close
	return in, nil
}

// deliveries returns the calls for a batch.
func (in *ingest) deliveries(batchID string) []delivery {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]delivery(nil), in.calls[batchID]...)
}

func (in *ingest) close() { _ = in.srv.Close() }
