package integration

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/longshore/longshore/cluster/journal"
)

// history is what the logs say happened.
//
// Node logs (the log:PATH sink, cluster mode) hold
//
//	session\t<rank>\t<session>
//	<epoch>\t<rank>\t<step>\t<key>[\tpad][\tpx:<digest>]
//	commit\t<epoch>\t<rank>\t<step>
//
// and the coordinator's commit log, appended to by every coordinator life
//
//	life\t<incarnation>\t<generation restored, 0: fresh>
//	ack\t<epoch>\t<rank>\t<session>\t<step>\t<offset>[\t<token>]
//
// where a restored life first logs again the ranks' last commits its
// state holds (sessions of earlier lives): they are durable, but the life
// that made them may have died before logging them.
//
// Committed history is what the coordinator acknowledged: a node killed
// after its commit was acknowledged but before it wrote its commit line
// never writes it, so acks come from the coordinator's log; the nodes'
// commit lines must be a subset of it. A life that restored generation G
// rewinds committed history to G: earlier acks whose token names a later
// generation are no longer committed (their samples are issued again),
// and a fresh life (0) rewinds it to nothing.
type history struct {
	delivered map[stepKey][]sample   // by rank session, epoch and step
	acked     map[sessionEpoch]int64 // largest acknowledged step still committed
	allAcked  map[sessionEpoch]int64 // largest acknowledged step, rewound or not
	nodeAcked map[sessionEpoch]int64 // from the nodes' commit lines
	lives     []life
	rewound   int // acks a later life rewound
}

// life is one coordinator life as its commit log begins it.
type life struct {
	incarnation uint64
	restored    uint64 // generation restored; 0: fresh
	// committedBefore is committed history (after this life's rewind) as
	// the life found it, per epoch: keys of real samples.
	committedBefore map[int]map[string]bool
	acks            int // acks this life wrote
}

type ackRec struct {
	k    sessionEpoch
	step int64
	gen  uint64 // from the token; 0: none
	life int
}

type sessionEpoch struct {
	rank, session string
	epoch         int
}

type stepKey struct {
	sessionEpoch
	step int64
}

type sample struct {
	key string
	pad bool
	px  string // pixel digest (--log-pixels); "" if not logged
}

// parseDelivery parses a delivery line's fields: epoch, rank, step and
// the sample. ok is false for other lines and for a torn last line of a
// killed node.
func parseDelivery(fs []string) (epoch int, rank string, step int64, s sample, ok bool) {
	if n := len(fs); n >= 5 && strings.HasPrefix(fs[n-1], "px:") {
		s.px = strings.TrimPrefix(fs[n-1], "px:")
		if len(s.px) != 16 {
			return 0, "", 0, s, false
		}
		fs = fs[:n-1]
	}
	if len(fs) >= 5 && fs[4] == "short" { // a clip shorter than its window
		fs = append(fs[:4:4], fs[5:]...)
	}
	if !(len(fs) == 4 || len(fs) == 5 && fs[4] == "pad") {
		return 0, "", 0, s, false
	}
	e, err1 := strconv.Atoi(fs[0])
	st, err2 := strconv.ParseInt(fs[2], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, "", 0, s, false
	}
	s.key, s.pad = unpackedKey(fs[3]), len(fs) == 5
	return e, fs[1], st, s, true
}

// unpackedKey is the key a packed sample had before longshore-pack put it
// in a tar ("shards/shard-000003.tar/c1/x.jpg" -> "c1/x.jpg"), so that a
// packed run is checked against the uploaded dataset's keys; other keys
// are returned as they are.
func unpackedKey(key string) string {
	if _, rest, ok := strings.Cut(key, ".tar/"); ok {
		return rest
	}
	return key
}

func readHistory(nodeLogs []string, coordLog string) (*history, error) {
	h := &history{delivered: map[stepKey][]sample{}, acked: map[sessionEpoch]int64{},
		allAcked: map[sessionEpoch]int64{}, nodeAcked: map[sessionEpoch]int64{}}
	bump := func(m map[sessionEpoch]int64, k sessionEpoch, step int64) {
		if v, ok := m[k]; !ok || step > v {
			m[k] = step
		}
	}
	for _, path := range nodeLogs {
		f, err := os.Open(path)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		session := map[string]string{}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Split(sc.Text(), "\t")
			switch {
			case len(fs) == 3 && fs[0] == "session":
				session[fs[1]] = fs[2]
			case len(fs) == 4 && fs[0] == "commit":
				e, err1 := strconv.Atoi(fs[1])
				s, err2 := strconv.ParseInt(fs[3], 10, 64)
				if err1 == nil && err2 == nil {
					bump(h.nodeAcked, sessionEpoch{fs[2], session[fs[2]], e}, s)
				}
			default:
				e, rank, st, smp, ok := parseDelivery(fs)
				if !ok {
					continue // a torn last line of a killed node
				}
				k := stepKey{sessionEpoch{rank, session[rank], e}, st}
				h.delivered[k] = append(h.delivered[k], smp)
			}
		}
		f.Close()
	}
	f, err := os.Open(coordLog)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var acks []ackRec
	// A life first logs again the commits it restored (their acks may
	// have died with the life before): committed history as the life
	// found it includes them, so it is taken at the life's first ack of
	// its own sessions.
	before := func() {
		if l := len(h.lives) - 1; l >= 0 && h.lives[l].committedBefore == nil {
			h.lives[l].committedBefore = h.committedKeys(acks)
		}
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Split(sc.Text(), "\t")
		switch {
		case len(fs) == 3 && fs[0] == "life":
			inc, err1 := strconv.ParseUint(fs[1], 10, 64)
			g, err2 := strconv.ParseUint(fs[2], 10, 64)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("coordinator commit log: bad line %q", sc.Text())
			}
			before()
			kept := acks[:0]
			for _, a := range acks {
				if g != 0 && a.gen <= g {
					kept = append(kept, a)
				} else {
					h.rewound++
				}
			}
			acks = kept
			h.lives = append(h.lives, life{incarnation: inc, restored: g})
		case (len(fs) == 6 || len(fs) == 7) && fs[0] == "ack":
			e, err1 := strconv.Atoi(fs[1])
			s, err2 := strconv.ParseInt(fs[4], 10, 64)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("coordinator commit log: bad line %q", sc.Text())
			}
			a := ackRec{k: sessionEpoch{fs[2], fs[3], e}, step: s, life: len(h.lives) - 1}
			if n := len(h.lives); n > 0 && sessionLife(fs[3]) == h.lives[n-1].incarnation {
				before()
			}
			if len(fs) == 7 {
				tok, err := journal.ParseToken(fs[6])
				if err != nil {
					return nil, fmt.Errorf("coordinator commit log: %w", err)
				}
				a.gen = tok.Gen
			}
			acks = append(acks, a)
			bump(h.allAcked, a.k, s)
			if len(h.lives) > 0 {
				h.lives[len(h.lives)-1].acks++
			}
		default:
			return nil, fmt.Errorf("coordinator commit log: bad line %q", sc.Text())
		}
	}
	before()
	for _, a := range acks {
		bump(h.acked, a.k, a.step)
	}
	return h, sc.Err()
}

// committedPixels returns the pixel digest of every real sample in
// committed history, per epoch and key, and a problem for each sample
// whose deliveries in committed steps disagree or carry no digest.
func (h *history) committedPixels() (map[int]map[string]string, []string) {
	out := map[int]map[string]string{}
	var problems []string
	for k, ss := range h.delivered {
		if t, ok := h.acked[k.sessionEpoch]; !ok || k.step > t {
			continue
		}
		for _, s := range ss {
			if s.pad {
				continue
			}
			if s.px == "" {
				problems = append(problems, fmt.Sprintf("epoch %d %s: no pixel digest logged", k.epoch, s.key))
				continue
			}
			if out[k.epoch] == nil {
				out[k.epoch] = map[string]string{}
			}
			if old, ok := out[k.epoch][s.key]; ok && old != s.px {
				problems = append(problems, fmt.Sprintf("epoch %d %s: committed twice with different pixels", k.epoch, s.key))
			}
			out[k.epoch][s.key] = s.px
		}
	}
	sort.Strings(problems)
	return out, problems
}

// committedKeys returns, per epoch, the real samples in the steps acks
// commit.
func (h *history) committedKeys(acks []ackRec) map[int]map[string]bool {
	through := map[sessionEpoch]int64{}
	for _, a := range acks {
		if v, ok := through[a.k]; !ok || a.step > v {
			through[a.k] = a.step
		}
	}
	out := map[int]map[string]bool{}
	for k, ss := range h.delivered {
		if t, ok := through[k.sessionEpoch]; ok && k.step <= t {
			for _, s := range ss {
				if s.pad {
					continue
				}
				if out[k.epoch] == nil {
					out[k.epoch] = map[string]bool{}
				}
				out[k.epoch][s.key] = true
			}
		}
	}
	return out
}

// checkResume checks that every coordinator life after the first resumed
// exactly at the committed cursor it restored: no sample committed before
// it was delivered again — committed or not — by a session of that life.
func (h *history) checkResume() []string {
	var problems []string
	for i, l := range h.lives {
		if i == 0 || l.restored == 0 {
			continue
		}
		again := map[int]int{}
		var example string
		for k, ss := range h.delivered {
			if sessionLife(k.session) != l.incarnation {
				continue
			}
			for _, s := range ss {
				if !s.pad && l.committedBefore[k.epoch][s.key] {
					again[k.epoch]++
					example = fmt.Sprintf("%s in epoch %d step %d of %s@%s", s.key, k.epoch, k.step, k.rank, k.session)
				}
			}
		}
		for e, n := range again {
			problems = append(problems, fmt.Sprintf("life %d (restored gen %d): %d samples committed before it were delivered again in epoch %d (e.g. %s)",
				i, l.restored, n, e, example))
		}
	}
	return problems
}

// sessionLife is the coordinator incarnation of a session "<inc>.<seq>".
func sessionLife(session string) uint64 {
	inc, _, _ := strings.Cut(session, ".")
	v, _ := strconv.ParseUint(inc, 10, 64)
	return v
}

// check verifies the promise for every epoch: the real samples in
// committed steps are exactly the dataset, padding excluded. It returns
// the problems found (nil: none).
func (h *history) check(keys []string, epochs int) []string {
	var problems []string
	for k, s := range h.nodeAcked {
		if a, ok := h.allAcked[k]; !ok || a < s {
			problems = append(problems, fmt.Sprintf("node logged commit %v step %d, coordinator acknowledged %d", k, s, a))
		}
	}
	for e := range epochs {
		count := map[string]int{}
		for k, ss := range h.delivered {
			if k.epoch != e {
				continue
			}
			a, ok := h.acked[k.sessionEpoch]
			if !ok || k.step > a {
				continue
			}
			for _, s := range ss {
				if !s.pad {
					count[s.key]++
				}
			}
		}
		var missing, twice []string
		for _, key := range keys {
			switch n := count[key]; {
			case n == 0:
				missing = append(missing, key)
			case n > 1:
				twice = append(twice, fmt.Sprintf("%s×%d", key, n))
			}
			delete(count, key)
		}
		if len(missing) > 0 {
			problems = append(problems, fmt.Sprintf("epoch %d: %d samples missing from committed steps: %v", e, len(missing), first(missing)))
		}
		if len(twice) > 0 {
			problems = append(problems, fmt.Sprintf("epoch %d: %d samples more than once: %v", e, len(twice), first(twice)))
		}
		if len(count) > 0 {
			problems = append(problems, fmt.Sprintf("epoch %d: %d keys not in the dataset", e, len(count)))
		}
	}
	return append(problems, h.checkResume()...)
}

// steps returns, for epoch e, each rank session's number of delivered
// steps.
func (h *history) steps(e int) map[string]int64 {
	return h.stepsOf(e, func(string) bool { return true })
}

// stepsOf counts the steps each rank session of the sessions keep takes
// delivered in epoch e. Steps are the trainer's: a session's first one
// follows its rank's last acknowledged step, so it need not be 0.
func (h *history) stepsOf(e int, keep func(session string) bool) map[string]int64 {
	out := map[string]int64{}
	for k := range h.delivered {
		if k.epoch == e && keep(k.session) {
			out[k.rank+"@"+k.session]++
		}
	}
	return out
}

// samplesBy returns how many real samples each rank delivered in
// committed steps of epoch e.
func (h *history) samplesBy(e int) map[string]int {
	out := map[string]int{}
	for k, ss := range h.delivered {
		if a, ok := h.acked[k.sessionEpoch]; k.epoch == e && ok && k.step <= a {
			for _, s := range ss {
				if !s.pad {
					out[k.rank]++
				}
			}
		}
	}
	return out
}

func first(s []string) []string {
	sort.Strings(s)
	if len(s) > 5 {
		return s[:5]
	}
	return s
}
