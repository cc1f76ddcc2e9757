package faults

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// tcpProxy forwards TCP connections from its own loopback address to a
// target. cut closes every connection it carries and refuses new ones
// until heal: a partition of that path.
type tcpProxy struct {
	t      *testing.T
	l      net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{t: t, l: l, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *tcpProxy) Addr() string { return p.l.Addr().String() }

func (p *tcpProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		go pipe(up, c)
		go pipe(c, up)
	}
}

// setCut cuts (true) or heals (false) the path.
func (p *tcpProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
	}
}

func (p *tcpProxy) close() {
	p.l.Close()
	p.setCut(true)
	p.wg.Wait()
}

// udpProxy forwards UDP datagrams (QUIC) from its own loopback address to a
// target, one upstream socket per client address. While cut it drops every
// datagram in both directions, as a partitioned network does.
type udpProxy struct {
	t      *testing.T
	pc     *net.UDPConn
	target *net.UDPAddr

	mu      sync.Mutex
	cut     bool
	clients map[string]*net.UDPConn
	wg      sync.WaitGroup
}

func newUDPProxy(t *testing.T, target string) *udpProxy {
	ta, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	p := &udpProxy{t: t, pc: pc, target: ta, clients: map[string]*net.UDPConn{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *udpProxy) Addr() string { return p.pc.LocalAddr().String() }

func (p *udpProxy) isCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

func (p *udpProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
}

func (p *udpProxy) serve() {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := p.pc.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if p.isCut() {
			continue
		}
		up, err := p.upstream(from)
		if err != nil {
			continue
		}
		_, _ = up.Write(buf[:n])
	}
}

// upstream returns the socket that carries from's datagrams to the target,
// starting the goroutine that carries the answers back.
func (p *udpProxy) upstream(from *net.UDPAddr) (*net.UDPConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if up, ok := p.clients[from.String()]; ok {
		return up, nil
	}
	up, err := net.DialUDP("udp", nil, p.target)
	if err != nil {
		return nil, err
	}
	p.clients[from.String()] = up
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, err := up.Read(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue // ICMP unreachable while the target restarts
			}
			if p.isCut() {
				continue
			}
			_, _ = p.pc.WriteToUDP(buf[:n], from)
		}
	}()
	return up, nil
}

func (p *udpProxy) close() {
	p.pc.Close()
	p.mu.Lock()
	for _, up := range p.clients {
		up.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
