package webhook_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/webhook"
)

// TestGuardRefusesInternalAddresses: loopback, private, link-local,
// shared, unspecified, multicast and reserved addresses are refused (the
// IPv4 ones in IPv6 clothing too) unless an allowed network holds them;
// public ones pass.
func TestGuardRefusesInternalAddresses(t *testing.T) {
	t.Parallel()
	refused := []string{"127.0.0.1", "127.8.9.10", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1",
		"0.0.0.0", "224.0.0.1", "255.255.255.255", "::1", "::", "fe80::1", "fd00::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1",
		"64:ff9b::a00:1", "198.18.0.1"}
	var g webhook.Guard
	for _, a := range refused {
		require.ErrorIs(t, g.Check(netip.MustParseAddr(a)), webhook.ErrForbiddenAddress, a)
	}
	for _, a := range []string{"93.184.215.14", "8.8.8.8", "2606:4700:4700::1111"} {
		require.NoError(t, g.Check(netip.MustParseAddr(a)), a)
	}
	allow, err := webhook.ParseNetworks("127.0.0.0/8, 10.1.0.0/16 ::1")
	require.NoError(t, err)
	g = webhook.Guard{Allow: allow}
	for _, a := range []string{"127.0.0.1", "10.1.2.3", "::1", "::ffff:127.0.0.1"} {
		require.NoError(t, g.Check(netip.MustParseAddr(a)), a)
	}
	require.ErrorIs(t, g.Check(netip.MustParseAddr("10.2.0.1")), webhook.ErrForbiddenAddress)
	_, err = webhook.ParseNetworks("10.0.0.0/33")
	require.ErrorContains(t, err, "WEBHOOK_ALLOW_NETWORKS")
}

// TestGuardChecksAtDial: the client refuses the connection itself, after
// DNS (so a name resolving to loopback, as by DNS rebinding, gains
// nothing), and follows no redirect.
func TestGuardChecksAtDial(t *testing.T) {
	t.Parallel()
	hit := make(chan struct{}, 10)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hit <- struct{}{} }))
	t.Cleanup(target.Close)
	client := webhook.Guard{}.Client(5 * time.Second)
	port := strconv.Itoa(target.Listener.Addr().(*net.TCPAddr).Port)
	for _, url := range []string{target.URL, "http://localhost:" + port} {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		if resp != nil {
			_ = resp.Body.Close()
		}
		require.ErrorIs(t, err, webhook.ErrForbiddenAddress, url)
	}
	require.Empty(t, hit, "no request reached the loopback server")

	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusFound)
	}))
	t.Cleanup(redirect.Close)
	allowed := webhook.Guard{Allow: loopback}.Client(5 * time.Second)
	resp, err := allowed.Post(redirect.URL, "application/json", nil)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusFound, resp.StatusCode, "the redirect is the answer")
	require.Empty(t, hit, "the redirect's target is never called")
}
