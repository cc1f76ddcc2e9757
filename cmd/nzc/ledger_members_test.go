package main

import (
	"slices"
	"testing"

	"github.com/nzcfed/nzc/party/auditor/compliance"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

// view is an auditor's answer: the raft members it knows and the auditors
// its ledger registered.
func view(id string, members, registered []string) compliance.View {
	st := &compliance.Status{Auditor: raftnode.Status{ID: id}}
	for _, m := range members {
		st.Auditor.Peers = append(st.Auditor.Peers, raftnode.Peer{ID: m, Addr: m + ":7500"})
	}
	cp := &compliance.CheckpointInfo{}
	for _, r := range registered {
		cp.Cosigners = append(cp.Cosigners, compliance.Cosigner{ID: r})
	}
	return compliance.View{Auditor: id, Status: st, Checkpoint: cp}
}

// Status fails, naming the difference, when raft's membership is not the
// ledger's auditors: the state one auditor's join at another's address
// left behind ({a1, a3} in raft, a1–a3 in the ledger) was reported as "no
// two views disagree".
func TestMembershipDifferences(t *testing.T) {
	all := []string{"a1", "a2", "a3"}
	tests := []struct {
		name  string
		views []compliance.View
		want  []string
	}{
		{"agree", []compliance.View{view("a1", all, all), view("a2", all, all)}, nil},
		{"a registered auditor displaced", []compliance.View{view("a1", []string{"a1", "a3"}, all), view("a3", []string{"a1", "a3"}, all)},
			[]string{"MEMBERSHIP: the ledger registers auditor a2, but auditor a1's raft membership lacks it",
				"MEMBERSHIP: the ledger registers auditor a2, but auditor a3's raft membership lacks it"}},
		{"a voter the ledger does not know", []compliance.View{view("a1", append(all, "rogue"), all)},
			[]string{"MEMBERSHIP: auditor a1's raft membership holds rogue, which the ledger does not register as an auditor"}},
		{"an auditor that did not answer is skipped", []compliance.View{{Auditor: "a2", Error: "down"}, view("a1", all, all)}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := membershipDifferences(compliance.Views{Views: tc.views}); !slices.Equal(got, tc.want) {
				t.Fatalf("got %q\nwant %q", got, tc.want)
			}
		})
	}
}
