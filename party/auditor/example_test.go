package auditor_test

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"log/slog"
	"os"
	"os/signal"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/party/auditor"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

// How a binary runs an auditor: the federation CA and this auditor's
// certificate, its checkpoint key, its peers, its addresses and the genesis.
func Example() {
	var (
		ca        *x509.Certificate  // the federation CA
		cred      *crypto.Credential // this auditor's federation certificate (nzc://auditor/hospital-a)
		ledgerKey ed25519.PrivateKey // this auditor's checkpoint key
		genesis   [][]byte           // intake.ReadGenesis of the file nzc init wrote
	)
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	a, err := auditor.New(auditor.Config{
		ID:            "hospital-a",
		DataDir:       "/var/lib/nzc/auditor",
		RaftAddr:      "0.0.0.0:7400",
		AdvertiseAddr: "auditor.hospital-a.example:7400",
		IntakeAddr:    "0.0.0.0:7600",
		APIAddr:       "0.0.0.0:7700",
		DashboardAddr: "127.0.0.1:7800",
		OpsAddr:       "127.0.0.1:9400",
		Bootstrap:     true, // the same Peers on every founding auditor
		Peers: []raftnode.Peer{
			{ID: "hospital-a", Addr: "auditor.hospital-a.example:7400"},
			{ID: "hospital-b", Addr: "auditor.hospital-b.example:7400"},
			{ID: "regulator", Addr: "auditor.regulator.example:7400"},
		},
		CA: ca, Credential: cred, SigningKey: ledgerKey,
		Genesis: genesis,
		Logger:  log,
	})
	if err != nil {
		log.Error("auditor", "error", err) // a *raftnode.CorruptDataError names the damaged file
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := a.Run(ctx); err != nil {
		log.Error("auditor", "error", err)
	}
}
