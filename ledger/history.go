package ledger

// SpendPoint is a hospital's spend right after an accepted entry that
// charged it (a charge or a session opening) or changed its cap.
type SpendPoint struct {
	Index      uint64  `json:"index"`
	Timestamp  int64   `json:"timestamp"` // the proposer's, unix nanoseconds
	Hospital   string  `json:"hospital"`
	Epsilon    float64 `json:"epsilon"`
	DeltaSpent float64 `json:"delta_spent"`
	CapEpsilon float64 `json:"cap_epsilon"`
	CapDelta   float64 `json:"cap_delta"`
}

// SpendHistory replays entries and returns every hospital's spend over time,
// in entry order: the series a dashboard plots. It fails, naming the entry,
// on a log that does not replay.
func SpendHistory(entries [][]byte) ([]SpendPoint, error) {
	return NewSpendReplay().Append(entries)
}

// SpendReplay is SpendHistory for a reader that follows a growing log: each
// Append replays only the entries it is given, which continue the log from
// Len. It keeps a replayed copy of the log.
type SpendReplay struct {
	st  *State
	err error
}

// NewSpendReplay returns a replay at the start of a log.
func NewSpendReplay() *SpendReplay { return &SpendReplay{st: New()} }

// Len is the number of entries replayed.
func (r *SpendReplay) Len() int64 { return r.st.TreeSize() }

// Append replays entries, the log's entries from Len on, and returns the
// spend points they add. On an entry that does not replay it returns the
// points before it and the error (a *ReplayError naming the entry), and
// every later Append returns that error: the state after it is not the
// log's.
func (r *SpendReplay) Append(entries [][]byte) ([]SpendPoint, error) {
	if r.err != nil {
		return nil, r.err
	}
	st := r.st
	var out []SpendPoint
	for _, b := range entries {
		if err := st.replayOne(st.TreeSize(), b); err != nil {
			r.err = err
			return out, err
		}
		en, _ := DecodeEntry(b)
		if en.Status != StatusAccepted {
			continue
		}
		c, _ := DecodeCommand(en.Command)
		var hospitals []string
		var ts int64
		switch body := c.Body.(type) {
		case *Charge:
			if body.Session != "" {
				continue // paid when the session opened
			}
			hospitals, ts = body.Hospitals, body.Timestamp
		case *OpenSession:
			hospitals, ts = body.Hospitals, body.Timestamp
		case *OpenAccount:
			hospitals, ts = []string{body.Hospital}, body.Timestamp
		case *ChangeCap:
			hospitals, ts = []string{body.Hospital}, body.Timestamp
		}
		for _, h := range hospitals {
			a, _ := st.Account(h)
			out = append(out, SpendPoint{Index: en.Index, Timestamp: ts, Hospital: h, Epsilon: a.Epsilon,
				DeltaSpent: a.DeltaSpent, CapEpsilon: a.CapEpsilon, CapDelta: a.CapDelta})
		}
	}
	return out, nil
}
