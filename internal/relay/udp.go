package relay

import (
	"net"
	"sync"
	"time"
)

// maxDatagram is the largest datagram a relay forwards.
const maxDatagram = 64 << 10

// udpIdle is how long a client's upstream socket lives without traffic.
const udpIdle = 2 * time.Minute

// UDP starts a relay that forwards datagrams from clients on its own
// loopback address to target and the target's replies back, each delayed
// and possibly dropped as link says, with randomness from seed.
func UDP(target string, link Link, seed uint64) (*Relay, error) {
	r, err := newRelay(target, link, seed)
	if err != nil {
		return nil, err
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r.addr, r.close = pc.LocalAddr().String(), pc.Close
	r.wg.Add(1)
	go r.serveUDP(pc)
	return r, nil
}

func (r *Relay) serveUDP(pc net.PacketConn) {
	defer r.wg.Done()
	var mu sync.Mutex
	upstream := map[string]*net.UDPConn{}
	buf := make([]byte, maxDatagram)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		key := from.String()
		mu.Lock()
		up, ok := upstream[key]
		if !ok {
			up = r.dialUpstream(pc, from, func() {
				mu.Lock()
				delete(upstream, key)
				mu.Unlock()
			})
			if up != nil {
				upstream[key] = up
			}
		}
		mu.Unlock()
		if up == nil {
			continue
		}
		r.deliver(buf[:n], func(b []byte) { _, _ = up.Write(b) })
	}
}

// dialUpstream opens the client's socket towards the target and forwards
// the target's replies to the client until the socket idles or closes.
func (r *Relay) dialUpstream(pc net.PacketConn, client net.Addr, gone func()) *net.UDPConn {
	ta, err := net.ResolveUDPAddr("udp", *r.target.Load())
	if err != nil {
		return nil
	}
	up, err := net.DialUDP("udp", nil, ta)
	if err != nil || !r.track(up) {
		return nil
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer gone()
		defer up.Close()
		buf := make([]byte, maxDatagram)
		for {
			_ = up.SetReadDeadline(time.Now().Add(udpIdle))
			n, err := up.Read(buf)
			if err != nil {
				return
			}
			r.deliver(buf[:n], func(b []byte) { _, _ = pc.WriteTo(b, client) })
		}
	}()
	return up
}

// deliver sends a copy of b after the link's delay, unless the link drops it.
func (r *Relay) deliver(b []byte, send func([]byte)) {
	d, lost := r.latency(true)
	if lost {
		r.dropped.Add(1)
		return
	}
	c := append([]byte(nil), b...)
	r.forwarded.Add(1)
	if d == 0 {
		send(c)
		return
	}
	time.AfterFunc(d, func() {
		select {
		case <-r.closed:
		default:
			send(c)
		}
	})
}
