package relay

import (
	"net"
	"time"
)

// chunk is bytes read from one side, to be written to the other at a time.
type chunk struct {
	b  []byte
	at time.Time
}

// TCP starts a relay that accepts connections on its own loopback address
// and forwards each to target, every chunk of bytes in each direction
// delayed as link says (its Loss is not used) and kept in order.
func TCP(target string, link Link, seed uint64) (*Relay, error) {
	r, err := newRelay(target, link, seed)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r.addr, r.close = ln.Addr().String(), ln.Close
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed
			}
			r.wg.Add(1)
			go r.pipeTCP(c)
		}
	}()
	return r, nil
}

func (r *Relay) pipeTCP(c net.Conn) {
	defer r.wg.Done()
	if !r.track(c) {
		return
	}
	up, err := net.DialTimeout("tcp", *r.target.Load(), 10*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	if !r.track(up) {
		_ = c.Close()
		return
	}
	done := make(chan struct{}, 2)
	for _, p := range [][2]net.Conn{{c, up}, {up, c}} {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.copyDelayed(p[1], p[0])
			done <- struct{}{}
		}()
	}
	<-done
	<-done
	_ = c.Close()
	_ = up.Close()
}

// copyDelayed copies src to dst, each chunk written no earlier than its
// delay after it was read and never before the chunk read before it. At
// the end of src it closes dst for writing once everything is written.
func (r *Relay) copyDelayed(dst, src net.Conn) {
	q := make(chan chunk, 256)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(q)
		var last time.Time
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				d, _ := r.latency(false)
				at := time.Now().Add(d)
				if at.Before(last) {
					at = last
				}
				last = at
				select {
				case q <- chunk{buf[:n], at}:
				case <-r.closed:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	for ch := range q {
		if wait := time.Until(ch.at); wait > 0 {
			t.Reset(wait)
			select {
			case <-t.C:
			case <-r.closed:
				return
			}
		}
		if _, err := dst.Write(ch.b); err != nil {
			_ = src.Close()
			for range q { // let the reader finish
			}
			return
		}
		r.forwarded.Add(1)
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}
