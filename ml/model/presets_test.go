package model

import (
	"errors"
	"slices"
	"testing"

	"github.com/nzcfed/nzc/ml/data"
)

func TestPresets(t *testing.T) {
	mnist := data.Shape{Height: 28, Width: 28, Channels: 1}
	for _, tc := range []struct {
		name   string
		kind   string
		hidden []int
		conv   int
		params int
	}{
		{KindSoftmax, KindSoftmax, nil, 0, 784*10 + 10},
		{KindMLP, KindMLP, []int{256}, 0, 784*256 + 256 + 256*10 + 10},
		{PresetSmallMLP, KindMLP, []int{32}, 0, 784*32 + 32 + 32*10 + 10},
		{KindCNN, KindCNN, []int{64}, 2, -1},
		{PresetSmallCNN, KindCNN, nil, 2, -1},
		// 5·5·16+16, 5·5·16·32+32, then 7·7·32 features into 128 units and 10.
		{PresetWideCNN, KindCNN, []int{128}, 2, 5*5*16 + 16 + 5*5*16*32 + 32 + 7*7*32*128 + 128 + 128*10 + 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !slices.Contains(PresetNames(), tc.name) {
				t.Fatalf("PresetNames() lacks %q", tc.name)
			}
			s, err := Preset(tc.name, mnist, 10)
			if err != nil {
				t.Fatal(err)
			}
			if s.Kind != tc.kind || !slices.Equal(s.Hidden, tc.hidden) || len(s.Conv) != tc.conv {
				t.Fatalf("Preset(%q) = %+v, want kind %s, hidden %v, %d convolutions", tc.name, s, tc.kind, tc.hidden, tc.conv)
			}
			n, err := s.Validate()
			if err != nil {
				t.Fatal(err)
			}
			if tc.params >= 0 && n != tc.params {
				t.Fatalf("Preset(%q) has %d parameters, want %d", tc.name, n, tc.params)
			}
		})
	}
	// Inputs too small to pool twice get the first convolution block only.
	tiny := data.Shape{Height: 3, Width: 3, Channels: 1}
	for _, name := range []string{KindCNN, PresetWideCNN, PresetSmallCNN} {
		if s, err := Preset(name, tiny, 2); err != nil || len(s.Conv) != 1 {
			t.Errorf("Preset(%q) of a 3×3 input: %d convolutions (%v), want 1", name, len(s.Conv), err)
		}
	}
	if _, err := Preset("huge-mlp", mnist, 10); !errors.Is(err, ErrSpec) {
		t.Fatalf("an unknown preset gave %v, want ErrSpec", err)
	}
}
