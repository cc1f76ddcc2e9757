package dashboard

import (
	"fmt"
	"strings"

	"github.com/nzcfed/nzc/ledger"
)

// BurntSession is an nzc-svt session the ledger shows ended with its K
// refusals having answered fewer queries than Options.SVTMinAnswers: one
// of its hospitals may be voting against the others, and each of them paid
// the session's whole ε for little. It is derived from the ledger's session
// entries alone (the opening's K and hospitals, the counts of its charges
// and closing), which are public outputs.
type BurntSession struct {
	Session   string   `json:"session"`
	Student   string   `json:"student"`
	Hospitals []string `json:"hospitals"`
	Opened    uint64   `json:"opened"` // the entry that opened it
	Ended     uint64   `json:"ended"`  // the entry that brought its refusals to K (or closed it)
	Time      string   `json:"time"`
	Refusals  uint64   `json:"refusals"`
	Answers   uint64   `json:"answers"`
	Text      string   `json:"text"`
}

// sessionCount is one open session's opening and counts so far.
type sessionCount struct {
	student          string
	hospitals        []string
	k                uint64
	opened           uint64
	queries, answers uint64
	burnt            bool
}

// sessionScan follows the log's sessions, entry by entry.
type sessionScan struct {
	sessions map[string]*sessionCount
	burnt    []BurntSession
}

// scan reads entries (encoded, in order) for session openings, their
// charges and closings, and records each session that burns: its refusals
// reach K with fewer than minAnswers answered (0: fewer than K, the
// aggregator's default svt_min_answers).
func (s *sessionScan) scan(entries [][]byte, minAnswers uint64) {
	if s.sessions == nil {
		s.sessions = map[string]*sessionCount{}
	}
	for _, b := range entries {
		en, err := ledger.DecodeEntry(b)
		if err != nil || en.Status != ledger.StatusAccepted {
			continue
		}
		c, err := ledger.DecodeCommand(en.Command)
		if err != nil {
			continue
		}
		switch body := c.Body.(type) {
		case *ledger.OpenSession:
			s.sessions[body.SessionID] = &sessionCount{student: body.Student, hospitals: body.Hospitals, k: body.MaxRefusals, opened: en.Index}
		case *ledger.Charge:
			if ss := s.sessions[body.Session]; body.Session != "" && ss != nil {
				ss.queries += body.Queries
				ss.answers += body.Answers
				s.check(body.Session, ss, en.Index, body.Timestamp, minAnswers)
			}
		case *ledger.CloseSession:
			if ss := s.sessions[body.SessionID]; ss != nil {
				ss.queries, ss.answers = max(ss.queries, body.Queries), max(ss.answers, body.Answers)
				s.check(body.SessionID, ss, en.Index, body.Timestamp, minAnswers)
				delete(s.sessions, body.SessionID)
			}
		}
	}
}

func (s *sessionScan) check(id string, ss *sessionCount, index uint64, ts int64, minAnswers uint64) {
	refusals := ss.queries - ss.answers
	if ss.burnt || refusals < ss.k {
		return
	}
	min := minAnswers
	if min == 0 {
		min = ss.k
	}
	if ss.answers >= min {
		return
	}
	ss.burnt = true
	s.burnt = append(s.burnt, BurntSession{Session: id, Student: ss.student, Hospitals: ss.hospitals, Opened: ss.opened, Ended: index,
		Time: formatTime(ts), Refusals: refusals, Answers: ss.answers,
		Text: fmt.Sprintf("session %s of %s refused its %d queries having answered %d (fewer than %d): each of %s paid its whole ε; one of them may be voting against the others — the federation's administrator suspends it (nzc init suspend, nzc ledger submit)",
			id, strings.Join(ss.hospitals, ", "), refusals, ss.answers, min, strings.Join(ss.hospitals, ", "))})
}
