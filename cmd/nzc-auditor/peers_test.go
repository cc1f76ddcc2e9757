package main

import (
	"slices"
	"testing"

	"github.com/nzcfed/nzc/federation/config"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

func TestPeers(t *testing.T) {
	list := []string{"auditor-1=10.0.0.1:7500", "auditor-2=10.0.0.2:7500", "auditor-3=10.0.0.3:7500"}
	tests := []struct {
		name      string
		bootstrap bool
		found     []raftnode.Peer
		join      []string
	}{
		{"founding: every peer, itself included", true,
			[]raftnode.Peer{{ID: "auditor-1", Addr: "10.0.0.1:7500"}, {ID: "auditor-2", Addr: "10.0.0.2:7500"}, {ID: "auditor-3", Addr: "10.0.0.3:7500"}}, nil},
		{"joining: the others' addresses", false, nil, []string{"10.0.0.1:7500", "10.0.0.3:7500"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			members, found, join := peers(config.Auditor{ID: "auditor-2", Peers: list, Bootstrap: tt.bootstrap})
			if !slices.Equal(found, tt.found) || !slices.Equal(join, tt.join) {
				t.Fatalf("found %v, join %v; want %v, %v", found, join, tt.found, tt.join)
			}
			// Every configured peer binds its id to its address, founding or not.
			all := []raftnode.Peer{{ID: "auditor-1", Addr: "10.0.0.1:7500"}, {ID: "auditor-2", Addr: "10.0.0.2:7500"}, {ID: "auditor-3", Addr: "10.0.0.3:7500"}}
			if !slices.Equal(members, all) {
				t.Fatalf("members %v, want %v", members, all)
			}
		})
	}
}
