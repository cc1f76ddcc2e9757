package experiment

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/mechanism/budget"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/ensemble"
	"github.com/nzcfed/nzc/ml/metrics"
	"github.com/nzcfed/nzc/ml/model"
	"github.com/nzcfed/nzc/ml/selection"
)

// foldAgreement is the cross-validated agreement of students with the
// labels released in full (metrics.Refused where none was): the
// released labels split into folds (round robin in query index order), a
// bootstrap student trained on all folds but one predicts the one left
// out, and the share of the left-out labels it predicts is the
// agreement. It reads released labels and the unlabelled queries only:
// post-processing, free of charge (TestTuneSignal compares it with
// halvesAgreement, the plan's switch).
func (s *students) foldAgreement(ctx context.Context, full []int, folds int) (float64, error) {
	var labelled []int
	for q, l := range full {
		if l != metrics.Refused {
			labelled = append(labelled, q)
		}
	}
	if folds < 2 || len(labelled) < folds {
		return 0, fmt.Errorf("%w: %d released labels in %d folds: want at least 2 folds and a label in each", ErrConfig, len(labelled), folds)
	}
	agree := 0
	for f := range folds {
		train := slices.Clone(full)
		var out []int
		for i, q := range labelled {
			if i%folds == f {
				train[q] = metrics.Refused
				out = append(out, q)
			}
		}
		net, err := s.fit(ctx, s.bootSpec, fmt.Sprintf("signal student %d of %d", f+1, folds), train, true, uint64(f))
		if err != nil {
			return 0, err
		}
		pred, err := net.Predict(s.queries.Subset(out).X)
		if err != nil {
			return 0, err
		}
		for i, q := range out {
			if pred[i] == full[q] {
				agree++
			}
		}
	}
	return float64(agree) / float64(len(labelled)), nil
}

// TestTuneSignal measures the plan's switch signals on the tuning share
// only (as TestTunePlan: the tuning ensemble answers its own pool's first
// 8,000 images; no release teacher, query or held-out image is read).
// GNMax answers, in the balanced order, as many queries as fit beside a
// session of the share NZC_TUNE_SIGNAL_SESSION (default 0.4) of the cap
// NZC_TUNE_CAP (default 250/k); on those released labels it reports the
// students' cross-validated agreement (NZC_TUNE_SIGNAL_FOLDS folds,
// default 5; foldAgreement) and the agreement of two students trained on
// disjoint halves (halvesAgreement, the plan's switch), for NZC_TUNE_DRAWS seeded draws of
// the GNMax noise (default 2). A measurement, run only when asked:
//
//	scripts/fetch-data.sh
//	NZC_TUNE_SIGNAL=1 go test -run TestTuneSignal -v -timeout 2h ./experiment
//	NZC_TUNE_SIGNAL=1 NZC_TUNE_DATASET=mnist-hard go test -run TestTuneSignal -v -timeout 2h ./experiment
func TestTuneSignal(t *testing.T) {
	if os.Getenv("NZC_TUNE_SIGNAL") == "" {
		t.Skip("a measurement: set NZC_TUNE_SIGNAL=1")
	}
	ctx := context.Background()
	cfg, split := tunePreset(t)
	cfg.Data, cfg.CacheDir = split, "../.nzc-cache/teachers"
	const classes, scored = 10, 1000
	_, tuneTrain, tunePool := cfg.shares()
	k := cfg.tuningTeachers()
	capEps := tuneEnv(t, "NZC_TUNE_CAP", float64(ReferenceTeachers)/float64(k))
	share := tuneEnv(t, "NZC_TUNE_SIGNAL_SESSION", 0.4)
	folds := int(tuneEnv(t, "NZC_TUNE_SIGNAL_FOLDS", 5))
	tSpec, _ := model.Preset(cfg.TeacherModel, tuneTrain.Shape, classes)
	preds, err := teacherPredictions(ctx, cfg, tuneTrain, tunePool, tSpec, cfg.TeacherTrain, k, classes, time.Now, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	nq := tunePool.Len() - scored
	queries, holdout := tunePool.Slice(0, nq), tunePool.Slice(nq, tunePool.Len())
	qpreds := make([][]int, len(preds))
	for i, p := range preds {
		qpreds[i] = p[:nq]
	}
	hist, err := ensemble.Histograms(qpreds, nq, classes)
	if err != nil {
		t.Fatal(err)
	}
	tc := cfg
	tc.Data = &data.Split{Train: tuneTrain, Test: tunePool}
	tc.Teachers, tc.Holdout, tc.Tuning, tc.SeededNoise = []int{k}, scored, Tuning{}, true
	draws := int(tuneEnv(t, "NZC_TUNE_DRAWS", 2))
	order, err := selection.Order(ctx, tc.Selection, queries)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := mechanism.NZCSVT.PlanSession(share*capEps, mechanism.PresetSessionDelta, tc.sessionRefusals(), k, classes)
	if err != nil {
		t.Fatal(err)
	}
	g := mechanism.DefaultGrid()
	spent, err := sess.Charge(g, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	gn := ParamsFor(DefaultMechanisms()[string(mechanism.GNMax)], k, classes)
	n1, _, err := budget.Rest(spent, gn, capEps, tc.Delta, nq)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mechanism.New(gn)
	if err != nil {
		t.Fatal(err)
	}
	sSpec, _ := model.Preset(tc.StudentModel, tuneTrain.Shape, classes)
	bSpec := sSpec
	if tc.BootstrapModel != "" {
		bSpec, _ = model.Preset(tc.BootstrapModel, tuneTrain.Shape, classes)
	}
	st := &students{cfg: tc, spec: sSpec, bootSpec: bSpec, queries: queries, holdout: holdout, now: time.Now, log: slog.New(slog.DiscardHandler)}
	for d := range draws {
		hs := make([]mechanism.Histogram, n1)
		for j, q := range order[:n1] {
			hs[j] = mechanism.Histogram(hist[q])
		}
		res, err := mechanism.AnswerBatch(m, tc.noise(fmt.Sprintf("signal/%d/%v", k, capEps), d), hs)
		if err != nil {
			t.Fatal(err)
		}
		full := make([]int, nq)
		for i := range full {
			full[i] = metrics.Refused
		}
		right := 0
		for j, o := range res.Outcomes {
			full[order[j]] = o.Label
			if o.Label == queries.Y[order[j]] {
				right++
			}
		}
		start := time.Now()
		cv, err := st.foldAgreement(ctx, full, folds)
		if err != nil {
			t.Fatal(err)
		}
		halves, err := st.halvesAgreement(ctx, full)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s draw %d: %d gnmax labels (cap ε %v beside a session of %v of it), %d right; %d-fold agreement %.3f, halves' agreement %.3f (%v)",
			cfg.Dataset, d+1, n1, capEps, share, right, folds, cv, halves, time.Since(start).Round(time.Second))
	}
}
