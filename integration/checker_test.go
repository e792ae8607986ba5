package integration

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// history is what the logs say happened.
//
// Node logs (the log:PATH sink, cluster mode) hold
//
//	session\t<rank>\t<session>
//	<epoch>\t<rank>\t<step>\t<key>[\tpad]
//	commit\t<epoch>\t<rank>\t<step>
//
// and the coordinator's commit log
//
//	ack\t<epoch>\t<rank>\t<session>\t<step>\t<offset>
//
// Committed history is what the coordinator acknowledged: a node killed
// after its commit was acknowledged but before it wrote its commit line
// never writes it, so acks come from the coordinator's log; the nodes'
// commit lines must be a subset of it.
type history struct {
	delivered map[stepKey][]sample   // by rank session, epoch and step
	acked     map[sessionEpoch]int64 // largest acknowledged step
	nodeAcked map[sessionEpoch]int64 // from the nodes' commit lines
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
}

func readHistory(nodeLogs []string, coordLog string) (*history, error) {
	h := &history{delivered: map[stepKey][]sample{}, acked: map[sessionEpoch]int64{}, nodeAcked: map[sessionEpoch]int64{}}
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
			case len(fs) == 4 || len(fs) == 5 && fs[4] == "pad":
				e, err1 := strconv.Atoi(fs[0])
				s, err2 := strconv.ParseInt(fs[2], 10, 64)
				if err1 != nil || err2 != nil {
					continue // a torn last line of a killed node
				}
				k := stepKey{sessionEpoch{fs[1], session[fs[1]], e}, s}
				h.delivered[k] = append(h.delivered[k], sample{fs[3], len(fs) == 5})
			}
		}
		f.Close()
	}
	f, err := os.Open(coordLog)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Split(sc.Text(), "\t")
		if len(fs) != 6 || fs[0] != "ack" {
			return nil, fmt.Errorf("coordinator commit log: bad line %q", sc.Text())
		}
		e, _ := strconv.Atoi(fs[1])
		s, _ := strconv.ParseInt(fs[4], 10, 64)
		bump(h.acked, sessionEpoch{fs[2], fs[3], e}, s)
	}
	return h, sc.Err()
}

// check verifies the promise for every epoch: the real samples in
// committed steps are exactly the dataset, padding excluded. It returns
// the problems found (nil: none).
func (h *history) check(keys []string, epochs int) []string {
	var problems []string
	for k, s := range h.nodeAcked {
		if a, ok := h.acked[k]; !ok || a < s {
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
	return problems
}

// steps returns, for epoch e, each rank session's number of delivered
// steps.
func (h *history) steps(e int) map[string]int64 {
	out := map[string]int64{}
	for k := range h.delivered {
		if k.epoch == e {
			id := k.rank + "@" + k.session
			out[id] = max(out[id], k.step+1)
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
