package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nzcfed/nzc/party/auditor/compliance"
)

// ErrMembershipDiffers is returned by `nzc ledger status` when an
// auditor's raft membership is not the set of auditors its ledger
// registered, after the report is printed.
var ErrMembershipDiffers = errors.New("the raft membership differs from the auditors the ledger registered: see the MEMBERSHIP lines above; an auditor may have been displaced or removed — compare each auditor's members with the federation's configured peers")

// membershipDifferences compares, for every auditor that answered, the
// raft members it knows with the auditors its ledger registered (the
// cosigners its latest checkpoint names), and names each difference once.
func membershipDifferences(vs compliance.Views) []string {
	var out []string
	for _, v := range vs.Views {
		if v.Status == nil || v.Checkpoint == nil {
			continue
		}
		var members, registered []string
		for _, p := range v.Status.Auditor.Peers {
			members = append(members, p.ID)
		}
		for _, c := range v.Checkpoint.Cosigners {
			registered = append(registered, c.ID)
		}
		for _, id := range registered {
			if !slices.Contains(members, id) {
				out = append(out, fmt.Sprintf("MEMBERSHIP: the ledger registers auditor %s, but auditor %s's raft membership lacks it", id, v.Name()))
			}
		}
		for _, id := range members {
			if !slices.Contains(registered, id) {
				out = append(out, fmt.Sprintf("MEMBERSHIP: auditor %s's raft membership holds %s, which the ledger does not register as an auditor", v.Name(), id))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func writeMembership(b *strings.Builder, diffs []string) {
	for _, d := range diffs {
		fmt.Fprintln(b, d)
	}
}
