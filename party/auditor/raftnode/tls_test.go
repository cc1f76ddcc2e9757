package raftnode

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nzcfed/nzc/party/auditor/internal/auditortest"
)

// testCA issues certificates like the federation CA: the party's role and
// id in a URI SAN nzc://<role>/<id>.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
	mu   sync.Mutex
	next int64
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test federation CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool, next: 2}
}

func (ca *testCA) issue(t testing.TB, role, id string) tls.Certificate {
	t.Helper()
	return ca.issueValid(t, role, id, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
}

// issueValid issues a certificate valid from notBefore to notAfter.
func (ca *testCA) issueValid(t testing.TB, role, id string, notBefore, notAfter time.Time) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca.mu.Lock()
	serial := ca.next
	ca.next++
	ca.mu.Unlock()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: role + "/" + id},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{{Scheme: "nzc", Host: role, Path: "/" + id}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tlsPair returns the server and client configs of one party.
func (ca *testCA) tlsPair(t testing.TB, role, id string) (*tls.Config, *tls.Config) {
	cert := ca.issue(t, role, id)
	server := &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.pool,
		MinVersion:   tls.VersionTLS13,
	}
	client := &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      ca.pool,
		MinVersion:   tls.VersionTLS13,
	}
	return server, client
}

// streamLayer is auditor id's raft stream layer on a loopback mux
// listener, closed when the test ends.
func (ca *testCA) streamLayer(t testing.TB, id string) *streamLayer {
	t.Helper()
	server, client := ca.tlsPair(t, "auditor", id)
	m, err := newMuxListener("127.0.0.1:0", nil, server, auditortest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); m.wait() })
	return &streamLayer{m: m, client: clientTLS(client)}
}

// tlsCluster is a cluster of durable nodes on loopback TLS.
type tlsCluster struct {
	t    testing.TB
	ca   *testCA
	dirs []string
	sms  []*chainSM
	// machines, when set, replace sms as the nodes' state machines.
	machines []StateMachine
	nodes    []*Node
	addrs    []string
	cancel   []context.CancelFunc
	done     []chan error
	// maxPacked is every node's Config.MaxPacked.
	maxPacked int
	// configure, when set, adjusts every node's Config.
	configure func(*Config)
}

func (c *tlsCluster) config(i int, bind string, join []string) Config {
	server, client := c.ca.tlsPair(c.t, "auditor", c.ids(i))
	cfg := Config{
		DataDir:       c.dirs[i],
		NodeID:        c.ids(i),
		BindAddr:      bind,
		ServerTLS:     server,
		ClientTLS:     client,
		StateMachine:  c.machine(i),
		Logger:        auditortest.Logger(c.t).With("node", c.ids(i)),
		VerifyRemoval: testVerifyRemoval,
		Tuning: Tuning{
			HeartbeatTimeout: 500 * time.Millisecond,
			ElectionTimeout:  500 * time.Millisecond,
			ApplyTimeout:     5 * time.Second,
			MaxPacked:        c.maxPacked,
		},
	}
	if c.configure != nil {
		c.configure(&cfg)
	}
	if i == 0 && join == nil {
		cfg.Bootstrap = true
	} else {
		cfg.Join = join
	}
	return cfg
}

func (c *tlsCluster) machine(i int) StateMachine {
	if c.machines != nil {
		return c.machines[i]
	}
	return c.sms[i]
}

func (c *tlsCluster) ids(i int) string {
	return []string{"hospital-a", "hospital-b", "regulator", "d", "e"}[i]
}

// run starts node i with cfg and runs it until stop(i).
func (c *tlsCluster) run(i int, cfg Config) {
	c.t.Helper()
	n, err := New(cfg)
	if err != nil {
		c.t.Fatalf("start %s: %v", cfg.NodeID, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	c.nodes[i], c.addrs[i], c.cancel[i], c.done[i] = n, n.Addr(), cancel, done
}

func (c *tlsCluster) stop(i int) {
	if c.nodes[i] == nil {
		return
	}
	c.cancel[i]()
	// A node stopped while its join call still waits for the answer (the
	// cluster may list it already) ends with the cancellation: that is
	// the stop, not a failure.
	if err := <-c.done[i]; err != nil && !errors.Is(err, context.Canceled) {
		c.t.Errorf("stop %s: %v", c.ids(i), err)
	}
	c.nodes[i] = nil
}

func newTLSCluster(t testing.TB, size int) *tlsCluster {
	t.Helper()
	return newTLSClusterWith(t, size, nil)
}

func newTLSClusterWith(t testing.TB, size int, machines []StateMachine) *tlsCluster {
	t.Helper()
	return newTLSClusterPacked(t, size, machines, 0)
}

// newTLSClusterPacked is newTLSClusterWith with every node's MaxPacked.
func newTLSClusterPacked(t testing.TB, size int, machines []StateMachine, maxPacked int) *tlsCluster {
	t.Helper()
	return newTLSClusterConfigured(t, size, machines, maxPacked, nil)
}

// newTLSClusterConfigured is newTLSClusterPacked with every node's Config
// adjusted by configure.
func newTLSClusterConfigured(t testing.TB, size int, machines []StateMachine, maxPacked int, configure func(*Config)) *tlsCluster {
	t.Helper()
	c := &tlsCluster{
		t: t, ca: newTestCA(t), maxPacked: maxPacked, configure: configure,
		dirs: make([]string, size), sms: make([]*chainSM, size), nodes: make([]*Node, size),
		addrs: make([]string, size), cancel: make([]context.CancelFunc, size), done: make([]chan error, size),
		machines: machines,
	}
	for i := range size {
		c.dirs[i] = filepath.Join(t.TempDir(), "data")
		c.sms[i] = newChainSM()
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.stop(i)
		}
	})
	c.run(0, c.config(0, "127.0.0.1:0", nil))
	auditortest.WaitFor(t, 10*time.Second, "the bootstrap node to lead", func() bool { return c.nodes[0].Status().State == "Leader" })
	for i := 1; i < size; i++ {
		c.run(i, c.config(i, "127.0.0.1:0", []string{c.addrs[0]}))
	}
	auditortest.WaitFor(t, 15*time.Second, "every node to join", func() bool {
		return len(c.nodes[0].Status().Peers) == size
	})
	return c
}

// leader waits for a node to lead and returns its index.
func (c *tlsCluster) leader() int {
	c.t.Helper()
	li := -1
	auditortest.WaitFor(c.t, 10*time.Second, "a leader", func() bool {
		for i, n := range c.nodes {
			if n != nil && n.Status().State == "Leader" {
				li = i
				return true
			}
		}
		return false
	})
	return li
}

func (c *tlsCluster) waitConverged(within time.Duration) {
	c.t.Helper()
	c.waitConvergedNodes(within, c.nodes)
}

// waitConvergedNodes waits until the given nodes hold the same state.
func (c *tlsCluster) waitConvergedNodes(within time.Duration, nodes []*Node) {
	c.t.Helper()
	auditortest.WaitFor(c.t, within, "the nodes to converge", func() bool {
		_, ok := converged(nodes, c.nodes, c.sms)
		return ok
	})
}

// submitRetry submits cmd on n, resubmitting it on the errors after which
// a retry is safe for a state machine that recognises repeated ids.
func submitRetry(ctx context.Context, n *Node, cmd []byte) ([]byte, uint64, error) {
	b := backoff{}
	for {
		res, idx, err := n.Submit(ctx, cmd)
		if err == nil || !(errors.Is(err, ErrNoLeader) || errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrTimeout)) {
			return res, idx, err
		}
		if b.wait(ctx) != nil {
			return nil, 0, err
		}
	}
}

func TestTLSClusterForwardRestartCatchUp(t *testing.T) {
	c := newTLSCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Submit on every node: followers forward to the leader over mutual TLS.
	id := uint64(0)
	for round := range 5 {
		for i := range 3 {
			id++
			res, idx, err := submitRetry(ctx, c.nodes[i], chainCmd(id, "charge"))
			if err != nil {
				t.Fatalf("round %d submit on %s: %v", round, c.ids(i), err)
			}
			if len(res) != 8 || idx == 0 {
				t.Fatalf("submit result %x at %d", res, idx)
			}
		}
	}
	// A refusal crosses the forwarding link as a RejectedError.
	leader := -1
	for i, n := range c.nodes {
		if n.Status().State == "Leader" {
			leader = i
		}
	}
	follower := (leader + 1) % 3
	_, idx, err := submitRetry(ctx, c.nodes[follower], chainCmd(1000, "reject"))
	var rej *RejectedError
	if !errors.As(err, &rej) || idx == 0 {
		t.Fatalf("forwarded refusal: %v at %d, want RejectedError", err, idx)
	}
	// Join through a follower is forwarded, and repeating it is a no-op.
	st := c.nodes[leader].Status()
	var self Peer
	for _, p := range st.Peers {
		if p.ID == c.ids(follower) {
			self = p
		}
	}
	if err := c.nodes[follower].Join(ctx, self.ID, self.Addr); err != nil {
		t.Fatalf("idempotent join via follower: %v", err)
	}
	c.waitConverged(10 * time.Second)

	// Restart a follower from its durable store; it catches up on what it missed.
	restart := (leader + 2) % 3
	addr := c.addrs[restart]
	c.stop(restart)
	for range 20 {
		id++
		if _, _, err := submitRetry(ctx, c.nodes[leader], chainCmd(id, "while-down")); err != nil {
			t.Fatal(err)
		}
	}
	c.sms[restart] = newChainSM()
	c.run(restart, c.config(restart, addr, []string{c.addrs[leader]}))
	c.waitConverged(15 * time.Second)
	if n, _, _ := c.sms[restart].snapshotCount(); n != id {
		t.Fatalf("restarted node holds %d commands, want %d", n, id)
	}
	if err := c.nodes[restart].Ready(); err != nil {
		t.Fatalf("restarted node not ready after catching up: %v", err)
	}
}

func TestTLSRejectsNonAuditors(t *testing.T) {
	c := newTLSCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// forwarded reports whether node 0 answers a command forwarded to it
	// over conf.
	forwarded := func(conf *tls.Config, id uint64) bool {
		fc := &forwardClient{tls: conf, idle: map[string][]*fwdConn{}}
		defer fc.close()
		_, _, err := fc.call(ctx, c.addrs[0], opSubmit, chainCmd(id, "x"))
		return err == nil
	}

	// A student certificate from the same CA is refused by the auditor.
	_, studentClient := c.ca.tlsPair(t, "student", "s1")
	if forwarded(clientTLS(studentClient), 1) {
		t.Fatal("auditor accepted a command from a student certificate")
	}
	if c.sms[0].has(1) {
		t.Fatal("command from a student certificate was applied")
	}

	// An auditor refuses to talk to a server without the auditor role.
	studentServer, _ := c.ca.tlsPair(t, "student", "s2")
	ln, err := tls.Listen("tcp", "127.0.0.1:0", studentServer)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_ = conn.(*tls.Conn).Handshake()
				_ = conn.Close()
			}()
		}
	}()
	_, auditorClient := c.ca.tlsPair(t, "auditor", "x")
	_, err = dialChannel(ctx, ln.Addr().String(), clientTLS(auditorClient), chanRaft)
	if !errors.Is(err, ErrNotAuditor) {
		t.Fatalf("dial to a non-auditor: %v, want ErrNotAuditor", err)
	}

	// A certificate from another CA is refused.
	other := newTestCA(t)
	_, foreign := other.tlsPair(t, "auditor", "hospital-a")
	_, err = dialChannel(ctx, c.addrs[0], clientTLS(foreign), chanForward)
	// TLS 1.3 reports the server's refusal of a client certificate on the
	// first read.
	if err == nil && forwarded(clientTLS(foreign), 2) {
		t.Fatal("auditor accepted a certificate from another CA")
	}
	if c.sms[0].has(2) {
		t.Fatal("command from a foreign certificate was applied")
	}
}

func TestAuditorIDFromCert(t *testing.T) {
	tests := []struct {
		uri  string
		id   string
		fail bool
	}{
		{"nzc://auditor/hospital-a", "hospital-a", false},
		{"nzc://student/s1", "", true},
		{"nzc://auditor/", "", true},
		{"nzc://auditor/a/b", "", true},
		{"https://auditor/x", "", true},
	}
	for _, tt := range tests {
		u, _ := url.Parse(tt.uri)
		id, err := AuditorIDFromCert(&x509.Certificate{URIs: []*url.URL{u}})
		if (err != nil) != tt.fail || id != tt.id {
			t.Errorf("%s: got %q, %v", tt.uri, id, err)
		}
	}
}

// Followers keep accepting submissions across the loss of the leader: they
// forward to whichever auditor leads, and callers retry with the same id
// on the errors that say a retry is safe.
func TestTLSLeaderLossWithForwarding(t *testing.T) {
	c := newTLSCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leader := -1
	for i, n := range c.nodes {
		if n.Status().State == "Leader" {
			leader = i
		}
	}
	followers := []*Node{c.nodes[(leader+1)%3], c.nodes[(leader+2)%3]}

	const writers, perWriter = 6, 30
	var acked atomic.Int64
	var once sync.Once
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			node := followers[w%2]
			for k := range perWriter {
				id := uint64(w*perWriter + k + 1)
				b := backoff{}
				for {
					_, _, err := node.Submit(ctx, chainCmd(id, "charge"))
					if err == nil {
						break
					}
					if !errors.Is(err, ErrNoLeader) && !errors.Is(err, ErrOutcomeUnknown) && !errors.Is(err, ErrTimeout) {
						errs <- fmt.Errorf("id %d: %w", id, err)
						return
					}
					if b.wait(ctx) != nil {
						errs <- fmt.Errorf("id %d: gave up: %w", id, err)
						return
					}
				}
				if acked.Add(1) == writers*perWriter/3 {
					once.Do(func() { go c.stop(leader) })
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	auditortest.WaitFor(t, 10*time.Second, "the leader to be stopped", func() bool {
		return followers[0].Status().LeaderID != c.ids(leader) || followers[1].Status().LeaderID != c.ids(leader)
	})
	c.waitConvergedNodes(10*time.Second, followers)
	for _, i := range []int{(leader + 1) % 3, (leader + 2) % 3} {
		count, distinct, reordered := c.sms[i].snapshotCount()
		if count != writers*perWriter || distinct != writers*perWriter || reordered {
			t.Fatalf("%s: %d applied, %d distinct, reordered=%v; want %d", c.ids(i), count, distinct, reordered, writers*perWriter)
		}
	}
}

// One auditor's certificate cannot change the membership of others: the
// forwarding channel serves join and remove only for the auditor whose
// certificate the connection presents. (With this, a rogue voter "rogue-1"
// was joined and two auditors removed with a third's certificate alone.)
func TestForwardedMembershipOnlyForItself(t *testing.T) {
	c := newTLSCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Leadership may have moved under load since the cluster formed: the
	// rogue must be a follower now (a leader's own Remove is its
	// administrator's to call, not a forwarded request).
	li := c.leader()
	leader := c.addrs[li]
	rogue := c.nodes[(li+2)%3] // a follower
	victim := (li + 1) % 3     // the other follower
	for _, tc := range []struct {
		name string
		op   byte
		body []byte
	}{
		{"join a made-up voter", opJoin, encodePair("rogue-1", "127.0.0.1:1")},
		{"remove the leader", opRemove, []byte(c.ids(li))},
		{"remove another follower", opRemove, []byte(c.ids(victim))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := rogue.fwd.call(ctx, leader, tc.op, tc.body)
			if err == nil || !strings.Contains(err.Error(), "only for itself") {
				t.Fatalf("the leader served it: %v", err)
			}
		})
	}
	// Through the node's own API, forwarded to the leader: the same.
	if err := rogue.Remove(ctx, c.ids(victim)); err == nil {
		t.Fatal("a follower removed another auditor through the leader")
	}
	peers := c.nodes[li].Status().Peers
	if len(peers) != 3 {
		t.Fatalf("membership changed: %+v", peers)
	}
	for _, p := range peers {
		if p.ID == "rogue-1" {
			t.Fatalf("a made-up voter joined: %+v", peers)
		}
	}
}

// A command larger than a raft entry may carry is refused before it is
// proposed, so that every AppendEntries fits what a follower's guard
// accepts and a follower catching up is never refused.
func TestSubmitRefusesOversizedCommand(t *testing.T) {
	if maxAppendEntries*(2*maxBatchBytes+64<<10) > maxRPCBytes || maxAppendEntries < 1 {
		t.Fatalf("%d entries of up to %d bytes exceed the guard's %d", maxAppendEntries, 2*maxBatchBytes, maxRPCBytes)
	}
	c := newTLSCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	big := make([]byte, maxBatchBytes+1)
	before := c.nodes[0].Status().LastIndex
	for i, n := range c.nodes {
		if _, _, err := n.Submit(ctx, big); !errors.Is(err, ErrCommandTooLarge) {
			t.Fatalf("Submit of %d bytes at node %d: %v, want ErrCommandTooLarge", len(big), i, err)
		}
	}
	// Sent straight on the forwarding channel, the receiving node refuses it too.
	for i := range c.nodes {
		if _, _, err := c.nodes[(i+1)%3].fwd.call(ctx, c.addrs[i], opSubmit, big); err == nil || !strings.Contains(err.Error(), "larger than one raft entry") {
			t.Fatalf("forwarded to node %d: %v, want the refusal", i, err)
		}
	}
	if after := c.nodes[0].Status().LastIndex; after != before {
		t.Fatalf("the log grew from %d to %d", before, after)
	}
}

// Forward submits as the auditor whose certificate it carries: the leader
// applies the command, a follower answers where the leader is, and a
// certificate without the auditor role is refused with nothing applied.
func TestForward(t *testing.T) {
	c := newTLSCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Leadership may move under load: ask again whoever leads now.
	var li, fi int
	var nl *NotLeaderError
	for {
		li = c.leader()
		fi = (li + 1) % 3
		_, asFollower := c.ca.tlsPair(t, "auditor", c.ids(fi))
		_, _, err := Forward(ctx, c.addrs[li], asFollower, chainCmd(1, "x"))
		if errors.As(err, &nl) {
			continue
		}
		if err != nil {
			t.Fatalf("forwarded to the leader: %v", err)
		}
		if _, _, err := Forward(ctx, c.addrs[fi], asFollower, chainCmd(2, "x")); !errors.As(err, &nl) {
			t.Fatalf("forwarded to a follower: %v, want a *NotLeaderError", err)
		}
		break
	}
	c.waitConverged(15 * time.Second)
	if !c.sms[fi].has(1) || c.sms[fi].has(2) {
		t.Fatal("the forwarded command was not applied once, or the follower applied what it should have redirected")
	}
	_, asStudent := c.ca.tlsPair(t, "student", "s1")
	if _, _, err := Forward(ctx, c.addrs[li], asStudent, chainCmd(3, "x")); err == nil || c.sms[li].has(3) {
		t.Fatalf("forwarded with a student's certificate: %v, want it refused", err)
	}
}
