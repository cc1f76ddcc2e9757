package auditor_test

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net/http"
	"os"
	"os/signal"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor"
)

// How a binary runs an auditor: the federation certificate and CA, the
// auditor's ledger key, its peers, and an HTTP server for the probes.
func Example() {
	var (
		cert       tls.Certificate    // this auditor's federation certificate (nzc://auditor/hospital-a)
		caPool     *x509.CertPool     // the federation CA
		ledgerKey  ed25519.PrivateKey // this auditor's checkpoint key
		dataDir    = "/var/lib/nzc/auditor"
		foundation = []auditor.Peer{
			{ID: "hospital-a", Addr: "auditor.hospital-a.example:7400"},
			{ID: "hospital-b", Addr: "auditor.hospital-b.example:7400"},
			{ID: "regulator", Addr: "auditor.regulator.example:7400"},
		}
	)
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	sm, err := auditor.NewLedger(ledger.New(), "hospital-a", ledgerKey)
	if err != nil {
		log.Error("ledger", "error", err)
		return
	}
	node, err := auditor.New(auditor.Config{
		DataDir:       dataDir,
		NodeID:        "hospital-a",
		BindAddr:      "0.0.0.0:7400",
		AdvertiseAddr: "auditor.hospital-a.example:7400",
		ServerTLS: &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: caPool,
			ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13},
		ClientTLS:    &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: caPool, MinVersion: tls.VersionTLS13},
		Bootstrap:    true, // the same Peers on every founding auditor
		Peers:        foundation,
		StateMachine: sm,
		Logger:       log,
	})
	if err != nil {
		log.Error("auditor", "error", err) // a *CorruptDataError names the damaged file
		return
	}
	go func() { _ = http.ListenAndServe("127.0.0.1:9400", node.Handler()) }()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := node.Run(ctx); err != nil {
		log.Error("auditor", "error", err)
	}
}
