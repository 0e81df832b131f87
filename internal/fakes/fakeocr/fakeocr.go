// Package fakeocr is a fake OpenAI-compatible OCR provider for tests and
// the benchmark, spoken to through the real client (point
// ocr.OpenAIConfig.URL at Server.URL). The OCR provider is a service we do
// not run, so this hand-written fake is how provider calls are tested.
//
// It speaks one route, as DeepInfra and OpenAI do:
//
//	POST /v1/chat/completions   one user message: a text part and an image_url part holding a data: URL
//
// Requests need "Authorization: Bearer <key>"; anything else answers 401.
// Above its capacity (a token bucket: Options.Rate requests/s, Options.Burst)
// it answers 429 with Retry-After in whole seconds, as a provider whose limit
// is undocumented does. A per-test Behave function injects faults per
// request (any status, slow answers, raw answers). Errors are
// {"error": {"message": "...", "type": "..."}} bodies. The text of a page is
// TextFor(image bytes), so tests know what to expect. Nothing is logged.
package fakeocr

import (
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultKey is the API key expected when Options.Key is empty.
const DefaultKey = "fakeocr-test-key"

// DefaultImageLimit is how many requests keep their decoded image when
// Options.ImageLimit is zero.
const DefaultImageLimit = 10000

// maxRequestBytes bounds a request body: a page image, base64-encoded.
const maxRequestBytes = 64 << 20

// Options configures a fake. The zero value is usable: any key but
// DefaultKey is refused, capacity is unlimited, every request succeeds.
type Options struct {
	// Key is the expected API key (DefaultKey if empty).
	Key string
	// Rate is the capacity in requests per second; 0 means unlimited.
	Rate float64
	// Burst is the bucket's size (default: Rate rounded up, at least 1).
	Burst int
	// Behave decides, per request that passed the key and capacity checks,
	// how the fake answers. nil means success. It is called concurrently
	// and must be safe for that.
	Behave func(r Request) Behavior
	// ImageLimit is how many requests keep their decoded image (see
	// Requests); later ones keep everything else. 0 means
	// DefaultImageLimit, negative means no limit.
	ImageLimit int
	// Now is the clock the capacity's bucket refills by (time.Now if nil):
	// a test of the refill moves its own clock on instead of sleeping. It
	// is called concurrently and must be safe for that.
	Now func() time.Time
}

// Request is one chat-completions request as the fake decoded it from the
// wire (not from the client's types), so tests see exactly what was sent.
type Request struct {
	// N is the request's order of arrival, from 1, counting every request.
	N         int
	Model     string
	Prompt    string
	MediaType string
	// Image is the data: URL's decoded bytes (nil past Options.ImageLimit).
	Image []byte
	// Text is what a successful answer carries: TextFor(Image).
	Text string
	// Status is the HTTP status the fake answered: 0 when it hung up, 499
	// when the client went away during Behavior.Delay.
	Status int
}

// Behavior is how the fake answers one request.
type Behavior struct {
	// Status, if non-zero and not 200, answers with this status and an
	// error body carrying Message (default: the status text).
	Status  int
	Message string
	// RetryAfter is sent as the Retry-After header when not empty (seconds
	// or an HTTP date; any value, to test parsing).
	RetryAfter string
	// Delay is how long the fake waits before answering (a slow provider);
	// it stops waiting when the client goes away.
	Delay time.Duration
	// Body, if not nil, is sent as the answer's body as is, with Status
	// (200 if zero): malformed, empty or huge answers.
	Body []byte
	// Text replaces the answer's text when not empty.
	Text string
	// Hangup closes the connection without an answer (after Delay), as a
	// provider's crashed proxy does; the request is recorded with Status 0.
	Hangup bool
}

// Counts are exact totals by outcome.
type Counts struct {
	Requests     int         // every request received
	OK           int         // answered 200 with a transcription
	RateLimited  int         // answered 429 by the capacity check
	Unauthorized int         // answered 401 by the key check
	BadRequest   int         // answered 400 because the request was malformed
	Injected     int         // answered as Behave decided, other than plain success
	ByStatus     map[int]int // every answer by HTTP status
}

// TB is the part of testing.TB that New needs: a *testing.T in tests, or a
// stand-in in a program such as cmd/bench, which calls its Cleanup
// functions when it is done with the fake.
type TB interface {
	Helper()
	Cleanup(func())
}

// Server is a running fake. Its methods are safe for concurrent use.
type Server struct {
	// URL is the API base to give the client: requests go to
	// URL + "/chat/completions".
	URL string
	// Key is the API key the fake expects.
	Key string

	opts Options
	srv  *httptest.Server

	mu       sync.Mutex
	n        int
	tokens   float64
	last     time.Time
	counts   Counts
	requests []Request
}

// New starts a fake and closes it when the test ends.
func New(tb TB, opts Options) *Server {
	tb.Helper()
	if opts.Key == "" {
		opts.Key = DefaultKey
	}
	if opts.Rate > 0 && opts.Burst <= 0 {
		opts.Burst = max(1, int(math.Ceil(opts.Rate)))
	}
	if opts.ImageLimit == 0 {
		opts.ImageLimit = DefaultImageLimit
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Server{Key: opts.Key, opts: opts, tokens: float64(opts.Burst), last: opts.Now()}
	s.counts.ByStatus = map[int]int{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.record(Request{N: s.next()}, http.StatusNotFound, nil)
		writeError(w, http.StatusNotFound, "no route "+r.Method+" "+r.URL.Path, "not_found_error")
	})
	s.srv = httptest.NewServer(mux)
	s.URL = s.srv.URL + "/v1"
	tb.Cleanup(s.srv.Close)
	return s
}

// Close stops the server now (later calls get connection errors); the
// test's cleanup closes it anyway.
func (s *Server) Close() { s.srv.Close() }

// Counts returns exact totals, cheap enough to poll in benchmarks.
func (s *Server) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.counts
	c.ByStatus = make(map[int]int, len(s.counts.ByStatus))
	for k, v := range s.counts.ByStatus {
		c.ByStatus[k] = v
	}
	return c
}

// Requests returns the requests that got past the key and capacity checks
// and decoded, in the order they were answered.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// TextFor is the text the fake reads from an image: derived from the bytes'
// hash, so each distinct page has its own deterministic transcription.
func TextFor(image []byte) string {
	sum := sha256.Sum256(image)
	return "fakeocr page " + hex.EncodeToString(sum[:8])
}

func (s *Server) next() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return s.n
}

// take takes a token from the bucket, or says how long until one is there.
func (s *Server) take(now time.Time) (bool, time.Duration) {
	if s.opts.Rate <= 0 {
		return true, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens = min(float64(s.opts.Burst), s.tokens+now.Sub(s.last).Seconds()*s.opts.Rate)
	s.last = now
	if s.tokens >= 1 {
		s.tokens--
		return true, 0
	}
	return false, time.Duration((1 - s.tokens) / s.opts.Rate * float64(time.Second))
}

// record counts an answer; kept requests are those that decoded.
func (s *Server) record(r Request, status int, count func(*Counts)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts.Requests++
	s.counts.ByStatus[status]++
	if count != nil {
		count(&s.counts)
	}
	if r.Model != "" || r.Image != nil {
		r.Status = status
		if s.opts.ImageLimit >= 0 && len(s.requests) >= s.opts.ImageLimit {
			r.Image = nil
		}
		s.requests = append(s.requests, r)
	}
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	req := Request{N: s.next()}
	auth := r.Header.Get("Authorization")
	if subtle.ConstantTimeCompare([]byte(auth), []byte("Bearer "+s.opts.Key)) != 1 {
		s.record(Request{}, http.StatusUnauthorized, func(c *Counts) { c.Unauthorized++ })
		writeError(w, http.StatusUnauthorized, "Invalid API key", "authentication_error")
		return
	}
	if ok, wait := s.take(s.opts.Now()); !ok {
		s.record(Request{}, http.StatusTooManyRequests, func(c *Counts) { c.RateLimited++ })
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
		writeError(w, http.StatusTooManyRequests, "Rate limit exceeded", "rate_limit_error")
		return
	}
	if err := decode(r, &req); err != nil {
		s.record(Request{}, http.StatusBadRequest, func(c *Counts) { c.BadRequest++ })
		writeError(w, http.StatusBadRequest, err.Error(), "invalid_request_error")
		return
	}
	req.Text = TextFor(req.Image)

	var b Behavior
	if s.opts.Behave != nil {
		b = s.opts.Behave(req)
	}
	if b.Delay > 0 {
		t := time.NewTimer(b.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			s.record(req, 499, func(c *Counts) { c.Injected++ }) // nginx's "client closed request"
			return
		}
	}
	if b.Text != "" {
		req.Text = b.Text
	}
	if b.Hangup {
		s.record(req, 0, func(c *Counts) { c.Injected++ })
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
		return
	}
	status := cmp.Or(b.Status, http.StatusOK)
	injected := b.Status != 0 && b.Status != http.StatusOK || b.Body != nil
	s.record(req, status, func(c *Counts) {
		if injected {
			c.Injected++
		} else {
			c.OK++
		}
	})
	if b.RetryAfter != "" {
		w.Header().Set("Retry-After", b.RetryAfter)
	}
	switch {
	case b.Body != nil:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(b.Body)
	case status != http.StatusOK:
		writeError(w, status, cmp.Or(b.Message, http.StatusText(status)), "injected_error")
	default:
		writeJSON(w, http.StatusOK, completion(req))
	}
}

// decode reads the one user message's prompt and image from the request.
func decode(r *http.Request, req *Request) error {
	var body struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Type     string `json:"type"`
				Text     string `json:"text"`
				ImageURL struct {
					URL string `json:"url"`
				} `json:"image_url"`
			} `json:"content"`
		} `json:"messages"`
	}
	raw, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxRequestBytes))
	if err != nil {
		return fmt.Errorf("reading the request: %v", err)
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		return fmt.Errorf("the request is not the chat-completions JSON: %v", err)
	}
	if body.Model == "" {
		return fmt.Errorf("model is required")
	}
	if len(body.Messages) != 1 || body.Messages[0].Role != "user" {
		return fmt.Errorf("want one user message, got %d messages", len(body.Messages))
	}
	req.Model = body.Model
	for _, part := range body.Messages[0].Content {
		switch part.Type {
		case "text":
			req.Prompt += part.Text
		case "image_url":
			if req.Image != nil {
				return fmt.Errorf("want one image")
			}
			mediaType, data, err := parseDataURL(part.ImageURL.URL)
			if err != nil {
				return err
			}
			req.MediaType, req.Image = mediaType, data
		default:
			return fmt.Errorf("unknown content part type %q", part.Type)
		}
	}
	if req.Image == nil {
		return fmt.Errorf("the message has no image")
	}
	return nil
}

// parseDataURL decodes "data:<media type>;base64,<data>".
func parseDataURL(u string) (string, []byte, error) {
	rest, ok := strings.CutPrefix(u, "data:")
	if !ok {
		return "", nil, fmt.Errorf("the image URL is not a data: URL")
	}
	meta, payload, ok := strings.Cut(rest, ",")
	mediaType, isBase64 := strings.CutSuffix(meta, ";base64")
	if !ok || !isBase64 || !strings.HasPrefix(mediaType, "image/") {
		return "", nil, fmt.Errorf("the image URL is not a base64 image data: URL")
	}
	data, err := base64.StdEncoding.DecodeString(payload)
	if err != nil || len(data) == 0 {
		return "", nil, fmt.Errorf("the image data is not base64")
	}
	return mediaType, data, nil
}

func completion(r Request) []byte {
	answer := map[string]any{
		"id":      fmt.Sprintf("chatcmpl-fake-%d", r.N),
		"object":  "chat.completion",
		"created": time.Now().Unix(),
		"model":   r.Model,
		"choices": []any{map[string]any{
			"index":         0,
			"message":       map[string]any{"role": "assistant", "content": r.Text},
			"finish_reason": "stop",
		}},
		"usage": map[string]any{"prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020},
	}
	b, _ := json.Marshal(answer)
	return b
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeError(w http.ResponseWriter, status int, msg, typ string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": status}})
	writeJSON(w, status, b)
}
