package experiment

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/nzcfed/nzc/internal/jsonnum"
)

// MarshalJSON encodes unbounded ε as "inf".
func (r Row) MarshalJSON() ([]byte, error) {
	type plain Row
	return json.Marshal(struct {
		plain
		Epsilon jsonnum.Float `json:"epsilon"`
	}{plain(r), jsonnum.Float(r.Epsilon)})
}

// UnmarshalJSON decodes what MarshalJSON writes, and the rows of earlier
// results.json files, whose "epsilon" was the smaller of the proven ε and
// a smooth-sensitivity release drawn with seeded noise: there the proven ε
// is "epsilon_data_independent", and a released value becomes a seeded
// estimate.
func (r *Row) UnmarshalJSON(b []byte) error {
	type plain Row
	j := struct {
		*plain
		Epsilon jsonnum.Float  `json:"epsilon"`
		Legacy  *jsonnum.Float `json:"epsilon_data_independent"`
	}{plain: (*plain)(r)}
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	r.Epsilon = float64(j.Epsilon)
	if j.Legacy != nil {
		if strings.HasPrefix(r.EpsilonSource, "smooth-sensitivity") {
			r.EstimateSmoothSensitivity, r.EstimateSeeded = r.Epsilon, true
		}
		r.Epsilon = float64(*j.Legacy)
		if r.EpsilonSource != notPrivate {
			r.EpsilonSource = proven
		}
	}
	return nil
}

// PaperRow is a figure the source paper reports, for the side-by-side table.
type PaperRow struct {
	Aggregator      string
	Params          string // the row's parameters as we print them; "" for the rows without any
	Teachers        int
	Queries         int
	StudentAccuracy float64 // percent
	LabelAccuracy   float64 // percent, 0 when not reported
	// EpsilonClaimed is the paper's claim as printed (">8.03" is a lower
	// bound); Claim is its value when the paper gives one, else NaN.
	EpsilonClaimed string
	Claim          float64
}

// PaperMNIST are the paper's MNIST results (student on the 9,000 queries,
// evaluated on the 1,000 held out), with the paper's parameters.
func PaperMNIST() []PaperRow {
	const lap, nzc = "Laplace b=20", "c=1e+100, Laplace b=1e-10"
	none := math.NaN()
	return []PaperRow{
		{"lnmax", lap, 250, 100, 63.5, 0, "2.04", 2.04},
		{"lnmax", lap, 250, 1000, 89.8, 0, "8.03", 8.03},
		{"lnmax", lap, 250, 5000, 94.1, 0, ">8.03", none},
		{"lnmax", lap, 250, 9000, 93.4, 93.02, ">8.03", none},
		{"nzc", nzc, 250, 9000, 95.1, 94.33, "≈0", 0},
		{"nzc", nzc, 5, 9000, 97.8, 0, "≈0", 0},
		{CleanVotes, "", 250, 9000, 94.5, 94.37, "", none},
		{CleanVotes, "", 5, 9000, 97.5, 0, "", none},
		{GroundTruth, "", 0, 9000, 98.1, 100, "", none},
	}
}

// PaperTeacherAccuracy is the paper's average single-teacher accuracy (%) by ensemble size.
func PaperTeacherAccuracy() map[int]float64 {
	return map[int]float64{1: 98.99, 5: 98.31, 10: 96.71, 25: 95.03, 50: 91.94, 100: 91.45, 250: 81.18}
}

func paperFor(r Row) *PaperRow {
	for _, p := range PaperMNIST() {
		if p.Aggregator == r.Aggregator && p.Queries == r.Queries && (p.Teachers == r.Teachers || r.Aggregator == GroundTruth) &&
			(p.Params == "" || p.Params == r.Params) {
			return &p
		}
	}
	return nil
}

// AddPaperClaims sets each row's epsilon_claimed to the ε the paper claims
// for it, where the row reproduces one of the paper's (MNIST, the paper's
// parameters) and the paper gives a value.
func (r *Report) AddPaperClaims() {
	for i := range r.Rows {
		if p := paperFor(r.Rows[i]); p != nil && !math.IsNaN(p.Claim) {
			c := p.Claim
			r.Rows[i].EpsilonClaimed = &c
		}
	}
}

// fmtEps prints an ε: "inf" when unbounded, scientific when astronomical.
func fmtEps(x float64) string {
	switch {
	case math.IsInf(x, 1):
		return "inf"
	case math.IsNaN(x):
		return "—"
	case x >= 1e6:
		return strconv.FormatFloat(x, 'e', 2, 64)
	}
	return strconv.FormatFloat(x, 'f', 3, 64)
}

func pct(x float64) string { return strconv.FormatFloat(100*x, 'f', 2, 64) }

// WriteMarkdown writes the table, with the paper's figures beside ours when
// paper is true (MNIST with the paper's split).
func (r *Report) WriteMarkdown(w io.Writer, paper bool) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Data set %s; teachers: %s; student: %s trained on the released labels%s, evaluated on %d held-out examples.\n\n",
		r.Dataset, r.TeacherModel, r.StudentModel, r.selfTrainingText(), r.HeldOut)
	b.WriteString(r.noiseText() + "\n\n")
	hdr := "| aggregator | parameters | selection | teachers | queries | answered | label acc. % | student acc. % | draws: worst %, sd | ε (proven) | δ | estimate: ε smooth-sens. release |"
	sep := "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	if paper {
		hdr += " paper: student % | paper: label % | paper: ε claimed |"
		sep += "---:|---:|---:|"
	}
	b.WriteString(hdr + "\n" + sep + "\n")
	for _, row := range r.Rows {
		k := strconv.Itoa(row.Teachers)
		if row.Aggregator == GroundTruth {
			k = "—"
		}
		delta := strconv.FormatFloat(row.Delta, 'g', 3, 64)
		if row.Delta == 0 {
			delta = "—"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d | %d | %s | %s | %s | %s | %s | %s |", row.Aggregator, row.Params, orDash(row.Selection), k, row.Queries, row.Answered,
			pct(row.LabelAccuracy), pct(row.StudentAccuracy), row.drawsText(), fmtEps(row.Epsilon), delta, row.estimateText())
		if paper {
			if p := paperFor(row); p != nil {
				lab := "—"
				if p.LabelAccuracy > 0 {
					lab = strconv.FormatFloat(p.LabelAccuracy, 'f', 2, 64)
				}
				claim := p.EpsilonClaimed
				if claim == "" {
					claim = "—"
				}
				fmt.Fprintf(&b, " %.1f | %s | %s |", p.StudentAccuracy, lab, claim)
			} else {
				b.WriteString(" — | — | — |")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\nε (proven) is a data-independent bound at the total δ shown (a mechanism's own additive δ included), the worst case over the row's planned queries; inf when there is none." +
		" The estimate is not a bound and never a row's ε: the smooth-sensitivity release is PATE 2018's private estimate of the data-dependent ε (\"seeded\": its noise came from the seed, so it is not private).\n")
	b.WriteString("\nRelease ensembles (mean single-teacher accuracy on all student examples; their votes are read by the mechanisms only):\n\n")
	// Reports written before the release ensembles' votes were kept out
	// of them, and not redacted, still show their clean-vote accuracy.
	clean := slices.ContainsFunc(r.Ensembles, func(e Ensemble) bool { return e.CleanVotesLabelAccuracy > 0 })
	b.WriteString("| teachers | model | mean single-teacher acc. % |")
	if clean {
		b.WriteString(" clean-vote label acc. % |")
	}
	if paper {
		b.WriteString(" paper: mean single-teacher acc. % |")
	}
	b.WriteString("\n|---:|---|---:|")
	if clean {
		b.WriteString("---:|")
	}
	if paper {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	pt := PaperTeacherAccuracy()
	for _, e := range r.Ensembles {
		fmt.Fprintf(&b, "| %d | %s | %s |", e.Teachers, e.Model, pct(e.TeacherMeanAccuracy))
		if clean {
			fmt.Fprintf(&b, " %s |", pctOrDash(e.CleanVotesLabelAccuracy))
		}
		if paper {
			if v, ok := pt[e.Teachers]; ok {
				fmt.Fprintf(&b, " %.2f |", v)
			} else {
				b.WriteString(" — |")
			}
		}
		b.WriteString("\n")
	}
	if t := r.Tuning; t != nil {
		fmt.Fprintf(&b, "\nTuning share: training examples %d–%d train the tuning ensembles, %d–%d are their query pool; %s.\n",
			t.TrainExamples[0]+1, t.TrainExamples[1], t.PoolExamples[0]+1, t.PoolExamples[1], t.Disjoint)
		b.WriteString("Diagnostics of their raw votes on the tuning pool (never a release; the first is the tuning ensemble):\n\n")
		b.WriteString("| teachers | model | mean single-teacher acc. % | clean-vote label acc. % |\n|---:|---|---:|---:|\n")
		for _, e := range t.Diagnostics {
			fmt.Fprintf(&b, "| %d | %s | %s | %s |\n", e.Teachers, e.Model, pct(e.TeacherMeanAccuracy), pct(e.CleanVotesLabelAccuracy))
		}
		if len(t.Settings) > 0 {
			b.WriteString("\nWhere each setting was chosen:\n\n")
			for _, s := range t.Settings {
				fmt.Fprintf(&b, "- %s: %s\n", s.Setting, s.ChosenOn)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// noiseText says where the releases' noise came from and how many draws
// each row has.
func (r *Report) noiseText() string {
	if r.BaselineDraws > 0 && r.Noise != "" {
		return fmt.Sprintf("%s The rows that are not a session's (no headline) made %d draw(s) each; the draws column says how many each row made.", r.noiseText1(), r.BaselineDraws)
	}
	return r.noiseText1()
}

// noiseText1 is noiseText without the comparison rows' draws.
func (r *Report) noiseText1() string {
	switch {
	case r.Noise == "":
		return "Release noise: one draw per row, from the experiment's seed (a run made before draws were recorded)."
	case strings.HasPrefix(r.Noise, "seeded:"):
		return fmt.Sprintf("Release noise: %d draw(s) per private row from seed %s: reproducible, and not private.", max(r.Draws, 1), strings.TrimPrefix(r.Noise, "seeded:"))
	}
	return fmt.Sprintf("Release noise: %d independent draw(s) per private row from %s; a row's answered, label and student accuracy are the draws' means.", max(r.Draws, 1), r.Noise)
}

// drawsText is the number of draws of a row, the worst draw's student
// accuracy and the spread, or "—" for a row without draws.
func (r Row) drawsText() string {
	switch len(r.Draws) {
	case 0:
		return "—"
	case 1:
		return "1"
	}
	return fmt.Sprintf("%d: %s, %s", len(r.Draws), pct(r.StudentAccuracyWorst), pct(r.StudentAccuracyStd))
}

// pctOrDash is pct, or "—" for a figure the report does not carry.
func pctOrDash(x float64) string {
	if x == 0 {
		return "—"
	}
	return pct(x)
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// estimateText is the smooth-sensitivity estimate of a row, or "—".
func (r Row) estimateText() string {
	if r.EstimateSmoothSensitivity == 0 {
		return "—"
	}
	t := fmtEps(r.EstimateSmoothSensitivity)
	if r.EstimateSeeded {
		t += " (seeded)"
	}
	return t
}

func (r *Report) selfTrainingText() string {
	views := ""
	if v := r.StudentViews; v != nil {
		views = fmt.Sprintf(", each held-out image predicted over %s", v)
	}
	if c := r.StudentConsistency; c != nil {
		labelled := ""
		if t := r.StudentTrain; t != nil {
			labelled = fmt.Sprintf(" or %d over its labels, whichever is longer", t.Epochs)
		}
		return fmt.Sprintf(" and by consistency on its unlabelled queries (threshold %g, weight %g, %d unlabelled per labelled, %d passes over them%s; every row alike)%s",
			c.Threshold, c.Weight, c.Ratio, c.Epochs, labelled, views)
	}
	if r.StudentSelfTraining.Rounds == 0 {
		return views
	}
	return fmt.Sprintf(" and self-trained on its unlabelled queries (%d round(s), pseudo-labels with mean probability ≥ %g agreeing across ±%d px shifts; every row alike)%s",
		r.StudentSelfTraining.Rounds, r.StudentSelfTraining.Confidence, r.StudentSelfTraining.Shift, views)
}

// WriteText writes a compact human-readable table.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "dataset %s, teachers %s, student %s%s, %d held out, wall time %.0fs, CPU time %.0fs\n", r.Dataset, r.TeacherModel, r.StudentModel, r.selfTrainingText(), r.HeldOut, r.WallSeconds, r.CPUSeconds)
	for _, e := range r.Ensembles {
		fmt.Fprintf(&b, "ensemble of %d: mean teacher accuracy %s%%\n", e.Teachers, pct(e.TeacherMeanAccuracy))
	}
	if t := r.Tuning; t != nil {
		for _, e := range t.Diagnostics {
			fmt.Fprintf(&b, "tuning ensemble of %d (diagnostic, on the tuning pool): mean teacher accuracy %s%%, clean-vote label accuracy %s%%\n", e.Teachers, pct(e.TeacherMeanAccuracy), pct(e.CleanVotesLabelAccuracy))
		}
	}
	b.WriteString(r.noiseText() + "\n")
	fmt.Fprintf(&b, "%-16s %-10s %8s %7s %8s %10s %10s %18s %12s %9s %18s\n", "aggregator", "selection", "teachers", "queries", "answered", "label acc%", "student%", "draws: worst, sd", "eps (proven)", "delta", "estimate (s.s.) *")
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "%-16s %-10s %8d %7d %8d %10s %10s %18s %12s %9.3g %18s\n", row.Aggregator, orDash(row.Selection), row.Teachers, row.Queries, row.Answered,
			pct(row.LabelAccuracy), pct(row.StudentAccuracy), row.drawsText(), fmtEps(row.Epsilon), row.Delta, row.estimateText())
	}
	b.WriteString("* smooth-sensitivity release of the data-dependent ε: a private estimate, not a bound (\"seeded\": not private)\n")
	_, err := io.WriteString(w, b.String())
	return err
}
