package api

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
)

// Failed credentials are limited per client address: a burst of
// DefaultFailureBurst refusals (401), then failureRate a second. An address
// past its limit is answered 429 at once, before any credential is checked
// or body read, until its budget refills.
const (
	DefaultFailureBurst = 30
	failureRate         = 1.0
	// maxClients bounds the addresses remembered; past it, those whose
	// budget has refilled are forgotten, and if none has, all are.
	maxClients = 65536
)

// throttle counts each client address's failed credentials.
type throttle struct {
	// header, when set, names the client (e.g. Fly-Client-IP, set by a
	// proxy in front); otherwise the connection's address does.
	header string
	burst  float64
	now    func() time.Time
	mu     sync.Mutex
	spent  map[string]*budget
	// tracked is len(spent), read without the lock: while no client has
	// failed, a request costs no lock.
	tracked atomic.Int64
}

// budget is an address's remaining failures, as of at.
type budget struct {
	left float64
	at   time.Time
}

func newThrottle(header string, burst int) *throttle {
	if burst <= 0 {
		burst = DefaultFailureBurst
	}
	return &throttle{header: http.CanonicalHeaderKey(header), burst: float64(burst), now: time.Now, spent: map[string]*budget{}}
}

// client is the address r comes from.
func (t *throttle) client(r *http.Request) string {
	if t.header != "" {
		if v := strings.TrimSpace(r.Header.Get(t.header)); v != "" {
			return v
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// refill is b's budget at now.
func (t *throttle) refill(b *budget, now time.Time) float64 {
	return math.Min(t.burst, b.left+now.Sub(b.at).Seconds()*failureRate)
}

// wait is how long r's client must wait before its next request, 0 for
// none. A client whose budget has refilled is forgotten.
func (t *throttle) wait(r *http.Request) time.Duration {
	if t.tracked.Load() == 0 {
		return 0
	}
	addr := t.client(r)
	t.mu.Lock()
	defer t.mu.Unlock()
	b, ok := t.spent[addr]
	if !ok {
		return 0
	}
	left := t.refill(b, t.now())
	if left >= t.burst {
		delete(t.spent, addr)
		t.tracked.Store(int64(len(t.spent)))
	}
	if left >= 1 {
		return 0
	}
	return time.Duration((1 - left) / failureRate * float64(time.Second))
}

// failed spends one of addr's failures.
func (t *throttle) failed(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	b, ok := t.spent[addr]
	if !ok {
		if len(t.spent) >= maxClients {
			t.forget(now)
		}
		b = &budget{left: t.burst, at: now}
		t.spent[addr] = b
		t.tracked.Store(int64(len(t.spent)))
	}
	b.left, b.at = math.Max(0, t.refill(b, now)-1), now
}

// forget drops the addresses whose budget has refilled, or all if none has.
func (t *throttle) forget(now time.Time) {
	for addr, b := range t.spent {
		if t.refill(b, now) >= t.burst {
			delete(t.spent, addr)
		}
	}
	if len(t.spent) >= maxClients {
		clear(t.spent)
	}
	t.tracked.Store(int64(len(t.spent)))
}

// throttleFailures answers 429 to a client past its budget of failed
// credentials (all routes but /healthz).
func (h *handlers) throttleFailures(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if c.Path() == "/healthz" {
			return next(c)
		}
		if wait := h.throttle.wait(c.Request()); wait > 0 {
			secs := int(math.Ceil(wait.Seconds()))
			c.Response().Header().Set("Retry-After", strconv.Itoa(secs))
			return echo.NewHTTPError(http.StatusTooManyRequests,
				"too many failed credentials from this address; try again in "+strconv.Itoa(secs)+" s")
		}
		return next(c)
	}
}
