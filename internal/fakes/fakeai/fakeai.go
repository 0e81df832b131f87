// Package fakeai is a fake OpenAI-compatible provider of embeddings and
// chat completions for tests and the benchmark, spoken to through the real
// clients (point embedding.OpenAIConfig.URL or tagging.OpenAIConfig.URL at
// Server.URL). The providers are services we do not run, so this
// hand-written fake is how their calls are tested.
//
// It speaks two routes, as OpenAI does:
//
//	POST /v1/embeddings         {"model", "input": string or [string], "dimensions"?, "encoding_format"?}
//	POST /v1/chat/completions   {"model", "messages": [{"role", "content"}], "response_format"?}
//
// Embeddings are VectorFor(model, input, dimensions): deterministic unit
// vectors, the same input always giving the same vector. A chat whose last
// user message is {"texts": [...]} is answered {"tags": [[...], ...]},
// TagsFor each text in order (the tagging client's protocol); any other
// chat is answered Options.Reply. Requests need "Authorization: Bearer
// <key>" (else 401); above its capacity (a token bucket: Options.Rate
// requests/s, Options.Burst) the fake answers 429 with Retry-After in whole
// seconds; a per-test Behave function injects faults per request (any
// status, slow answers, raw bodies, reordered or wrong answers). Errors are
// {"error": {"message", "type"}} bodies. Nothing is logged.
package fakeai

import (
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// DefaultKey is the API key expected when Options.Key is empty.
const DefaultKey = "fakeai-test-key"

// DefaultDimensions is the size of the vectors of a request that asks for
// no dimensions, and the most a request may ask for, when
// Options.MaxDimensions is zero (text-embedding-3-small's 1536).
const DefaultDimensions = 1536

// MaxInputs is the most inputs one embeddings request may hold (OpenAI's
// 2048).
const MaxInputs = 2048

const maxRequestBytes = 32 << 20

// Options configures a fake. The zero value is usable: any key but
// DefaultKey is refused, capacity is unlimited, every request succeeds.
type Options struct {
	// Key is the expected API key (DefaultKey if empty).
	Key string
	// Rate is the capacity in requests per second; 0 means unlimited.
	Rate float64
	// Burst is the bucket's size (default: Rate rounded up, at least 1).
	Burst int
	// MaxDimensions is the model's native size (DefaultDimensions if
	// zero): the size when a request asks for none, and a request asking
	// for more is answered 400.
	MaxDimensions int
	// Reply is the answer to a chat that is not the tagging protocol
	// ("ok" if empty).
	Reply string
	// Behave decides, per request that passed the key and capacity checks
	// and decoded, how the fake answers. nil means success. It is called
	// concurrently and must be safe for that.
	Behave func(r Request) Behavior
	// Keyless takes requests without a key, as a local server (Ollama,
	// vLLM, llama.cpp) does; Request.Authorized says whether one came.
	Keyless bool
	// RefuseDimensions answers 400 to an embeddings request that asks for
	// dimensions, as models without shortened vectors do.
	RefuseDimensions bool
	// RefuseJSONMode answers 400 to a chat that asks for a
	// response_format, as models without a JSON mode do.
	RefuseJSONMode bool
}

// Route names what a request asked for.
type Route string

// The routes.
const (
	Embeddings Route = "embeddings"
	Chat       Route = "chat"
)

// Request is one request as the fake decoded it from the wire (not from
// the client's types), so tests see exactly what was sent.
type Request struct {
	// N is the request's order of arrival, from 1, counting every request.
	N     int
	Route Route
	Model string
	// Inputs are an embeddings request's texts; Dimensions what it asked
	// for (0 if nothing), EncodingFormat likewise.
	Inputs         []string
	Dimensions     int
	EncodingFormat string
	// Messages are a chat's messages; ResponseFormat its
	// response_format.type ("" if none).
	Messages       []Message
	ResponseFormat string
	// Status is the HTTP status the fake answered: 0 when it hung up, 499
	// when the client went away during Behavior.Delay.
	Status int
	// Authorized says whether the request carried an Authorization header.
	Authorized bool
}

// Message is one chat message, its content flattened to text.
type Message struct {
	Role    string
	Content string
}

// Behavior is how the fake answers one request.
type Behavior struct {
	// Status, if non-zero and not 200, answers with this status and an
	// error body carrying Message (default: the status text).
	Status  int
	Message string
	// RetryAfter is sent as the Retry-After header when not empty.
	RetryAfter string
	// Delay is how long the fake waits before answering; it stops waiting
	// when the client goes away.
	Delay time.Duration
	// Body, if not nil, is sent as the answer's body as is, with Status
	// (200 if zero): malformed, empty or huge answers.
	Body []byte
	// Hangup closes the connection without an answer (after Delay).
	Hangup bool
	// Reverse sends an embeddings answer's items in reverse order (each
	// keeps its index), as a provider may.
	Reverse bool
	// Drop leaves the last item out of an embeddings answer.
	Drop bool
	// Dimensions, if not zero, is the size of the vectors sent instead.
	Dimensions int
	// Content, if not empty, replaces a chat answer's content.
	Content string
}

// Counts are exact totals by outcome.
type Counts struct {
	Requests     int         // every request received
	OK           int         // answered 200 as asked
	RateLimited  int         // answered 429 by the capacity check
	Unauthorized int         // answered 401 by the key check
	BadRequest   int         // answered 400 because the request was malformed
	Injected     int         // answered as Behave decided, other than plain success
	Inputs       int         // texts embedded in answers sent 200
	ByStatus     map[int]int // every answer by HTTP status
}

// TB is the part of testing.TB that New needs: a *testing.T in tests, or a
// stand-in in a program such as cmd/bench.
type TB interface {
	Helper()
	Cleanup(func())
}

// Server is a running fake. Its methods are safe for concurrent use.
type Server struct {
	// URL is the API base to give the client: requests go to
	// URL + "/embeddings" and URL + "/chat/completions".
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
	opts.Key = cmp.Or(opts.Key, DefaultKey)
	opts.MaxDimensions = cmp.Or(opts.MaxDimensions, DefaultDimensions)
	opts.Reply = cmp.Or(opts.Reply, "ok")
	if opts.Rate > 0 && opts.Burst <= 0 {
		opts.Burst = max(1, int(math.Ceil(opts.Rate)))
	}
	s := &Server{Key: opts.Key, opts: opts, tokens: float64(opts.Burst), last: time.Now()}
	s.counts.ByStatus = map[int]int{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/embeddings", func(w http.ResponseWriter, r *http.Request) { s.handle(w, r, Embeddings) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.handle(w, r, Chat) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.record(Request{N: s.next()}, http.StatusNotFound, nil)
		writeError(w, http.StatusNotFound, "no route "+r.Method+" "+r.URL.Path, "not_found_error")
	})
	s.srv = httptest.NewServer(mux)
	s.URL = s.srv.URL + "/v1"
	tb.Cleanup(s.srv.Close)
	return s
}

// Close stops the server now (later calls get connection errors).
func (s *Server) Close() { s.srv.Close() }

// Counts returns exact totals.
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

// VectorFor is the embedding the fake gives text: a unit vector of
// dimensions float32 values drawn from a generator seeded by a hash of
// model and text.
func VectorFor(model, text string, dimensions int) []float32 {
	sum := sha256.Sum256([]byte(model + "\x00" + text))
	rng := rand.New(rand.NewPCG(binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16])))
	v := make([]float32, dimensions)
	var norm float64
	for i := range v {
		x := rng.NormFloat64()
		v[i] = float32(x)
		norm += x * x
	}
	norm = math.Sqrt(norm)
	for i := range v {
		v[i] = float32(float64(v[i]) / norm)
	}
	return v
}

// TagsFor is the tags the fake gives text: its three most frequent words
// of four letters or more, lower-cased (ties in order of first use), or
// ["untagged"].
func TagsFor(text string) []string {
	counts := map[string]int{}
	var order []string
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) }) {
		if len([]rune(w)) < 4 {
			continue
		}
		if counts[w] == 0 {
			order = append(order, w)
		}
		counts[w]++
	}
	slices.SortStableFunc(order, func(a, b string) int { return counts[b] - counts[a] })
	if len(order) == 0 {
		return []string{"untagged"}
	}
	return order[:min(3, len(order))]
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
	if r.Route != "" {
		r.Status = status
		s.requests = append(s.requests, r)
	}
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request, route Route) {
	req := Request{N: s.next(), Route: route, Authorized: r.Header.Get("Authorization") != ""}
	if !s.opts.Keyless && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+s.opts.Key)) != 1 {
		s.record(Request{}, http.StatusUnauthorized, func(c *Counts) { c.Unauthorized++ })
		writeError(w, http.StatusUnauthorized, "Invalid API key", "authentication_error")
		return
	}
	if ok, wait := s.take(time.Now()); !ok {
		s.record(Request{}, http.StatusTooManyRequests, func(c *Counts) { c.RateLimited++ })
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
		writeError(w, http.StatusTooManyRequests, "Rate limit exceeded", "rate_limit_error")
		return
	}
	var err error
	if route == Embeddings {
		err = s.decodeEmbeddings(r, &req)
	} else {
		err = decodeChat(r, &req)
	}
	switch {
	case err != nil:
	case s.opts.RefuseDimensions && req.Dimensions != 0:
		err = fmt.Errorf("this model does not support 'dimensions'")
	case s.opts.RefuseJSONMode && req.ResponseFormat != "":
		err = fmt.Errorf("response_format %q is not supported by this model", req.ResponseFormat)
	}
	if err != nil {
		s.record(Request{}, http.StatusBadRequest, func(c *Counts) { c.BadRequest++ })
		writeError(w, http.StatusBadRequest, err.Error(), "invalid_request_error")
		return
	}

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
			s.record(req, 499, func(c *Counts) { c.Injected++ })
			return
		}
	}
	if b.Hangup {
		s.record(req, 0, func(c *Counts) { c.Injected++ })
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
		return
	}
	status := cmp.Or(b.Status, http.StatusOK)
	injected := status != http.StatusOK || b.Body != nil || b.Reverse || b.Drop || b.Dimensions != 0 || b.Content != ""
	s.record(req, status, func(c *Counts) {
		switch {
		case injected:
			c.Injected++
		default:
			c.OK++
		}
		if status == http.StatusOK && b.Body == nil {
			c.Inputs += len(req.Inputs)
		}
	})
	if b.RetryAfter != "" {
		w.Header().Set("Retry-After", b.RetryAfter)
	}
	switch {
	case b.Body != nil:
		writeJSON(w, status, b.Body)
	case status != http.StatusOK:
		writeError(w, status, cmp.Or(b.Message, http.StatusText(status)), "injected_error")
	case route == Embeddings:
		writeJSON(w, http.StatusOK, s.embeddings(req, b))
	default:
		writeJSON(w, http.StatusOK, s.completion(req, b))
	}
}

func (s *Server) decodeEmbeddings(r *http.Request, req *Request) error {
	var body struct {
		Model          string          `json:"model"`
		Input          json.RawMessage `json:"input"`
		Dimensions     *int            `json:"dimensions"`
		EncodingFormat string          `json:"encoding_format"`
	}
	if err := readJSON(r, &body); err != nil {
		return err
	}
	if body.Model == "" {
		return errors.New("model is required")
	}
	var one string
	if json.Unmarshal(body.Input, &one) == nil {
		req.Inputs = []string{one}
	} else if err := json.Unmarshal(body.Input, &req.Inputs); err != nil {
		return errors.New("input must be a string or an array of strings")
	}
	switch {
	case len(req.Inputs) == 0:
		return errors.New("input must not be empty")
	case len(req.Inputs) > MaxInputs:
		return fmt.Errorf("input has %d items, more than %d", len(req.Inputs), MaxInputs)
	case slices.Contains(req.Inputs, ""):
		return errors.New("input must not contain empty strings")
	}
	if body.Dimensions != nil {
		if *body.Dimensions < 1 || *body.Dimensions > s.opts.MaxDimensions {
			return fmt.Errorf("dimensions must be between 1 and %d", s.opts.MaxDimensions)
		}
		req.Dimensions = *body.Dimensions
	}
	switch body.EncodingFormat {
	case "", "float", "base64":
	default:
		return fmt.Errorf("unknown encoding_format %q", body.EncodingFormat)
	}
	req.Model, req.EncodingFormat = body.Model, body.EncodingFormat
	return nil
}

func decodeChat(r *http.Request, req *Request) error {
	var body struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		ResponseFormat struct {
			Type string `json:"type"`
		} `json:"response_format"`
	}
	if err := readJSON(r, &body); err != nil {
		return err
	}
	if body.Model == "" {
		return errors.New("model is required")
	}
	if len(body.Messages) == 0 {
		return errors.New("messages must not be empty")
	}
	for _, m := range body.Messages {
		var text string
		if json.Unmarshal(m.Content, &text) != nil {
			var parts []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			if err := json.Unmarshal(m.Content, &parts); err != nil {
				return fmt.Errorf("a %s message's content is neither text nor parts", m.Role)
			}
			for _, p := range parts {
				text += p.Text
			}
		}
		req.Messages = append(req.Messages, Message{Role: m.Role, Content: text})
	}
	req.Model, req.ResponseFormat = body.Model, body.ResponseFormat.Type
	return nil
}

func readJSON(r *http.Request, v any) error {
	raw, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxRequestBytes))
	if err != nil {
		return fmt.Errorf("reading the request: %v", err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("the request is not JSON: %v", err)
	}
	return nil
}

func (s *Server) embeddings(req Request, b Behavior) []byte {
	dims := cmp.Or(b.Dimensions, req.Dimensions, s.opts.MaxDimensions)
	data := make([]any, 0, len(req.Inputs))
	for i, text := range req.Inputs {
		v := VectorFor(req.Model, text, dims)
		var embedding any = v
		if req.EncodingFormat == "base64" {
			buf := make([]byte, 4*len(v))
			for j, x := range v {
				binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(x))
			}
			embedding = base64.StdEncoding.EncodeToString(buf)
		}
		data = append(data, map[string]any{"object": "embedding", "index": i, "embedding": embedding})
	}
	if b.Drop && len(data) > 0 {
		data = data[:len(data)-1]
	}
	if b.Reverse {
		slices.Reverse(data)
	}
	tokens := 0
	for _, text := range req.Inputs {
		tokens += len(strings.Fields(text))
	}
	out, _ := json.Marshal(map[string]any{
		"object": "list",
		"data":   data,
		"model":  req.Model,
		"usage":  map[string]any{"prompt_tokens": tokens, "total_tokens": tokens},
	})
	return out
}

func (s *Server) completion(req Request, b Behavior) []byte {
	content := b.Content
	if content == "" {
		content = s.opts.Reply
		var in struct {
			Texts []string `json:"texts"`
		}
		for _, m := range slices.Backward(req.Messages) {
			if m.Role == "user" {
				if json.Unmarshal([]byte(m.Content), &in) == nil && in.Texts != nil {
					tags := make([][]string, len(in.Texts))
					for i, t := range in.Texts {
						tags[i] = TagsFor(t)
					}
					answer, _ := json.Marshal(map[string]any{"tags": tags})
					content = string(answer)
				}
				break
			}
		}
	}
	out, _ := json.Marshal(map[string]any{
		"id":      fmt.Sprintf("chatcmpl-fakeai-%d", req.N),
		"object":  "chat.completion",
		"created": time.Now().Unix(),
		"model":   req.Model,
		"choices": []any{map[string]any{
			"index":         0,
			"message":       map[string]any{"role": "assistant", "content": content},
			"finish_reason": "stop",
		}},
		"usage": map[string]any{"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
	})
	return out
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
