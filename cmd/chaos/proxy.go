package main

import (
	"io"
	"net"
	"sync"
	"time"
)

// pgProxy stands between the orchestrators and Postgres: a TCP proxy that
// can cut them off while Postgres stays up (a network partition). While
// cut, it drops every connection it carries and refuses new ones at once;
// the driver's own reads go to Postgres directly.
type pgProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	until time.Time // cut until then
}

// startProxy listens on a free loopback port and carries connections to
// target, a Unix socket's path.
func startProxy(target string) (*pgProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &pgProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *pgProxy) Addr() string { return p.ln.Addr().String() }

// cut partitions the orchestrators from Postgres for d: every connection
// is dropped now, and new ones are closed as soon as they come.
func (p *pgProxy) cut(d time.Duration) {
	p.mu.Lock()
	p.until = time.Now().Add(d)
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
}

func (p *pgProxy) isCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Now().Before(p.until)
}

func (p *pgProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.until) {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *pgProxy) forget(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

func (p *pgProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.isCut() {
			_ = in.Close() // refused
			continue
		}
		go p.carry(in)
	}
}

// carry copies both ways between a client and Postgres until either side
// closes or the proxy cuts them.
func (p *pgProxy) carry(in net.Conn) {
	out, err := net.DialTimeout("unix", p.target, 5*time.Second)
	if err != nil {
		_ = in.Close()
		return
	}
	if !p.track(in, out) {
		_ = in.Close()
		_ = out.Close()
		return
	}
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		_ = dst.Close()
		_ = src.Close()
	}
	wg.Add(2)
	go pipe(out, in)
	go pipe(in, out)
	wg.Wait()
	p.forget(in, out)
}

func (p *pgProxy) close() { _ = p.ln.Close() }
