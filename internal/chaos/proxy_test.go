package chaos

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// routeProxy is a TCP proxy on 127.0.0.1 in front of one cluster route (one
// node dialling another). The test owns it: cut closes every connection it
// carries and refuses new ones (the route is partitioned); heal accepts and
// forwards again. It stops with the test.
type routeProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{} // both ends of every forwarded connection
	wg    sync.WaitGroup        // the accept loop and every copy goroutine
}

// newRouteProxy starts a proxy to target on a free loopback port.
func newRouteProxy(t *testing.T, target string) *routeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("route proxy: %v", err)
	}
	p := &routeProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// addr is the proxy's listening address, host:port.
func (p *routeProxy) addr() string { return p.ln.Addr().String() }

func (p *routeProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		refused := p.cut
		p.mu.Unlock()
		if refused {
			_ = in.Close()
			continue
		}
		out, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		if p.cut { // cut while dialling
			p.mu.Unlock()
			_ = in.Close()
			_ = out.Close()
			continue
		}
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

// pipe copies src to dst until either ends, then closes both.
func (p *routeProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	p.mu.Lock()
	delete(p.conns, src)
	delete(p.conns, dst)
	p.mu.Unlock()
	_ = src.Close()
	_ = dst.Close()
}

// partition closes every connection the proxy carries and refuses new ones
// until heal.
func (p *routeProxy) partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// heal lets connections through again.
func (p *routeProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// close stops the proxy and waits for its goroutines.
func (p *routeProxy) close() {
	_ = p.ln.Close()
	p.partition()
	p.wg.Wait()
}

// TestRouteProxyCutsAndHeals checks the proxy itself: bytes pass, a cut
// closes the open connection and refuses new ones, a heal lets them through.
func TestRouteProxyCutsAndHeals(t *testing.T) {
	t.Parallel()
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = echo.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { _, _ = io.Copy(c, c); _ = c.Close() })
		}
	})
	p := newRouteProxy(t, echo.Addr().String())

	roundTrip := func(c net.Conn) error {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		buf := make([]byte, 4)
		_, err := io.ReadFull(c, buf)
		return err
	}
	c, err := net.Dial("tcp", p.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	p.partition()
	if err := roundTrip(c); err == nil {
		t.Fatal("a cut left the open connection working")
	}
	c2, err := net.Dial("tcp", p.addr())
	if err == nil {
		if err := roundTrip(c2); err == nil {
			t.Fatal("a cut proxy forwarded a new connection")
		}
		_ = c2.Close()
	}
	p.heal()
	c3, err := net.Dial("tcp", p.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if err := roundTrip(c3); err != nil {
		t.Fatalf("after heal: %v", err)
	}
}
