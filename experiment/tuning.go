package experiment

import (
	"fmt"

	"github.com/nzcfed/nzc/ml/data"
)

// Tuning is the tuning share: the last Train examples of the training set,
// which no release teacher trains on. Of them, the last Pool are the
// tuning ensemble's query pool and the others train its Teachers teachers.
// Every statistic of raw votes an experiment reports (gap counts,
// clean-vote accuracy) is the tuning ensemble's, a diagnostic; the
// release ensembles' votes are read only by the mechanisms. The tuning
// harness (tune_test.go) chooses settings on the same share. Train = 0:
// no tuning share, and no diagnostics.
type Tuning struct {
	Train    int `json:"train"`
	Pool     int `json:"pool"`
	Teachers int `json:"teachers"` // 0: the primary ensemble's size
}

// Provenance says on what data one setting was chosen.
type Provenance struct {
	Setting  string `json:"setting"`
	ChosenOn string `json:"chosen_on"`
}

// TuningReport is what a report says of its tuning: the share and
// ensemble, that they are disjoint from the release, each setting's
// provenance, and the tuning ensemble's diagnostics.
type TuningReport struct {
	// TrainExamples and PoolExamples are the training-set examples
	// [from, to) the tuning ensemble trains on and asks.
	TrainExamples [2]int `json:"train_examples"`
	PoolExamples  [2]int `json:"pool_examples"`
	Teachers      int    `json:"teachers"`
	// Disjoint states what the tuning share is disjoint from.
	Disjoint string `json:"disjoint"`
	// Settings are the provenance of each tuned setting.
	Settings []Provenance `json:"settings,omitempty"`
	// Diagnostics are statistics of the tuning ensemble's raw votes on
	// its pool, and the plot-only ensembles' (trained on the tuning
	// share too): never a release's.
	Diagnostics []Ensemble `json:"diagnostics"`
}

// disjointText is TuningReport.Disjoint.
const disjointText = "the tuning share is training examples no release teacher trains on; its pool is neither a student query nor a held-out example"

// shares splits the training set into the release teachers' examples and
// the tuning share's teacher examples and pool (nil without a share).
func (c *Config) shares() (release, tuneTrain, tunePool *data.Dataset) {
	train := c.Data.Train
	n := train.Len()
	if c.Tuning.Train == 0 {
		return train, nil, nil
	}
	return train.Slice(0, n-c.Tuning.Train), train.Slice(n-c.Tuning.Train, n-c.Tuning.Pool), train.Slice(n-c.Tuning.Pool, n)
}

// tuningTeachers is the tuning ensemble's size.
func (c *Config) tuningTeachers() int {
	if c.Tuning.Teachers > 0 {
		return c.Tuning.Teachers
	}
	return c.Teachers[0]
}

// validateTuning checks the tuning share against the training set and the
// ensembles trained on it.
func (c *Config) validateTuning() error {
	t, n := c.Tuning, c.Data.Train.Len()
	if t.Train == 0 {
		if t.Pool != 0 || t.Teachers != 0 {
			return fmt.Errorf("%w: a tuning pool or ensemble without a tuning share (--tuning-train)", ErrConfig)
		}
		return nil
	}
	if t.Train >= n {
		return fmt.Errorf("%w: a tuning share of %d leaves none of the %d training examples to the release teachers", ErrConfig, t.Train, n)
	}
	if t.Train < 0 || t.Pool < 1 || t.Pool >= t.Train || t.Teachers < 0 {
		return fmt.Errorf("%w: tuning share %d, pool %d, %d teachers: want a positive share and a pool smaller than it", ErrConfig, t.Train, t.Pool, t.Teachers)
	}
	teach := t.Train - t.Pool
	for _, k := range append([]int{c.tuningTeachers()}, c.SweepTeachers...) {
		if k > teach {
			return fmt.Errorf("%w: tuning share of %d with a pool of %d leaves %d examples for %d tuning teachers; enlarge --tuning-train", ErrConfig, t.Train, t.Pool, teach, k)
		}
	}
	for _, k := range c.Teachers {
		if k > n-t.Train {
			return fmt.Errorf("%w: %d teachers for the %d training examples outside the tuning share", ErrConfig, k, n-t.Train)
		}
	}
	return nil
}
