package sizing

import (
	"errors"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/mechanism"
)

func TestCheck(t *testing.T) {
	unsized, err := mechanism.Preset(mechanism.ConfidentGNMax)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		p        func(teachers int) mechanism.Params
		teachers int
		refused  string // "" when it works
	}{
		{"sized for 90", func(k int) mechanism.Params { p, _ := Preset(mechanism.ConfidentGNMax, k, 10); return p }, 90, ""},
		{"sized for 150", func(k int) mechanism.Params { p, _ := Preset(mechanism.ConfidentGNMax, k, 10); return p }, 150, ""},
		{"250-teacher preset for 90", func(int) mechanism.Params { return unsized }, 90, "threshold T=200 is not below the 90 teachers"},
		{"gnmax sized for 3", func(k int) mechanism.Params { p, _ := Preset(mechanism.GNMax, k, 10); return p }, 3, "more teachers per hospital"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := Check(tc.p(tc.teachers), tc.teachers, 10, 8, 1e-5)
			if tc.refused != "" {
				if !errors.Is(err, ErrCannotWork) || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("err = %v, want ErrCannotWork naming %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if plan.Labels < 1 || plan.Epsilon > 8 || plan.Teachers != tc.teachers {
				t.Fatalf("plan %+v", plan)
			}
			t.Log(plan)
		})
	}
}
