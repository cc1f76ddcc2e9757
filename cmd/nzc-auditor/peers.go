package main

import (
	"strings"

	"github.com/nzcfed/nzc/federation/config"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

// peers reads the configured peers (id=raft address): every one binds that
// auditor to its address (members); with bootstrap, they are the cluster to
// found; otherwise the addresses of the other auditors to join through.
func peers(cfg config.Auditor) (members, found []raftnode.Peer, join []string) {
	for _, p := range cfg.Peers {
		id, addr, _ := strings.Cut(p, "=")
		members = append(members, raftnode.Peer{ID: id, Addr: addr})
		if cfg.Bootstrap {
			found = append(found, raftnode.Peer{ID: id, Addr: addr})
		} else if id != cfg.ID {
			join = append(join, addr)
		}
	}
	return members, found, join
}
