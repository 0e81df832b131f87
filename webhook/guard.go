package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/arke-institute/orchestrator/problem"
)

// Guard keeps the webhook requests away from the orchestrator's own
// networks (server-side request forgery): no loopback, link-local,
// private, shared (CGNAT), unspecified, multicast or reserved address is
// dialled unless an allowed network holds it (WEBHOOK_ALLOW_NETWORKS). The
// address is checked when the connection is dialled, after DNS, so a name
// that resolves elsewhere the second time (DNS rebinding) gains nothing.
type Guard struct {
	// Allow are the networks dialled whatever their kind.
	Allow []netip.Prefix
}

// ErrForbiddenAddress is an address the guard refuses.
var ErrForbiddenAddress = errors.New("address not allowed for webhooks")

// forbiddenNetworks are the special-purpose networks beyond what netip's
// predicates name (loopback, private, link-local, multicast, unspecified).
var forbiddenNetworks = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",       // this network
		"100.64.0.0/10",   // shared address space (CGNAT)
		"192.0.0.0/24",    // IETF protocol assignments
		"192.0.2.0/24",    // documentation
		"198.18.0.0/15",   // benchmarking
		"198.51.100.0/24", // documentation
		"203.0.113.0/24",  // documentation
		"240.0.0.0/4",     // reserved, broadcast
		"64:ff9b::/96",    // NAT64: an IPv4 address in disguise
		"64:ff9b:1::/48",  // local NAT64
		"100::/64",        // discard
		"2001:db8::/32",   // documentation
		"fec0::/10",       // site-local (deprecated)
		"2002::/16",       // 6to4: an IPv4 address in disguise
		"2001::/32",       // Teredo
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// ParseNetworks reads WEBHOOK_ALLOW_NETWORKS: CIDRs (or single addresses)
// separated by commas or spaces.
func ParseNetworks(text string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.FieldsFunc(text, func(r rune) bool { return r == ',' || r == ' ' }) {
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("WEBHOOK_ALLOW_NETWORKS: %q is no CIDR (e.g. 10.1.0.0/16) or address", f)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// Check refuses an address of the networks webhooks must not reach,
// unless allowed.
func (g Guard) Check(a netip.Addr) error {
	a = a.Unmap()
	for _, p := range g.Allow {
		if p.Contains(a) {
			return nil
		}
	}
	kind := ""
	switch {
	case !a.IsValid():
		kind = "invalid"
	case a.IsUnspecified():
		kind = "unspecified"
	case a.IsLoopback():
		kind = "loopback"
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		kind = "link-local"
	case a.IsPrivate():
		kind = "private"
	case a.IsMulticast(), a.IsInterfaceLocalMulticast():
		kind = "multicast"
	}
	for _, p := range forbiddenNetworks {
		if kind == "" && p.Contains(a) {
			kind = "special-purpose (" + p.String() + ")"
		}
	}
	if kind != "" {
		return fmt.Errorf("%w: %s is a %s address (WEBHOOK_ALLOW_NETWORKS can allow its network)", ErrForbiddenAddress, a, kind)
	}
	return nil
}

// control is the dialer's check of each address it connects to.
func (g Guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot read the address %q", ErrForbiddenAddress, address)
	}
	return g.Check(ap.Addr())
}

// Client is an HTTP client whose connections the guard checks. It
// follows no redirect (a 3xx is the answer), ignores proxy settings (a
// proxy would dial for it, unchecked) and gives up after timeout.
func (g Guard) Client(timeout time.Duration) *http.Client {
	dialer := &net.Dialer{Timeout: timeout, Control: g.control}
	transport := &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
	}
	return &http.Client{
		Transport:     transport,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// maxURLLength bounds a subscription's URL.
const maxURLLength = 2048

// CheckURL refuses a subscription's URL that is not http(s), carries
// credentials or a fragment, or whose host resolves to an address the
// guard refuses (checked again at each delivery).
func (g Guard) CheckURL(ctx context.Context, raw string) (*url.URL, error) {
	bad := func(format string, args ...any) error {
		return &problem.InputError{Msg: "invalid webhook url: " + fmt.Sprintf(format, args...)}
	}
	if len(raw) > maxURLLength {
		return nil, bad("longer than %d bytes", maxURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, bad("%v", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, bad("the scheme must be http or https, got %q", u.Scheme)
	case u.Hostname() == "":
		return nil, bad("no host")
	case u.User != nil:
		return nil, bad("credentials in the URL are not taken: the deliveries are signed")
	case u.Fragment != "":
		return nil, bad("a fragment is never sent")
	}
	addrs, err := resolve(ctx, u.Hostname())
	if err != nil {
		return nil, bad("cannot resolve %s: %v", u.Hostname(), err)
	}
	for _, a := range addrs {
		if err := g.Check(a); err != nil {
			return nil, bad("%s resolves to a forbidden address: %v", u.Hostname(), err)
		}
	}
	return u, nil
}

// resolve is the addresses of host, an IP address or a name.
func resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return []netip.Addr{a}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}
