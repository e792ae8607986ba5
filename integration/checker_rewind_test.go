package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longshore/longshore/cluster/journal"
)

// TestCheckerRewind checks the checker on hand-written logs: a second
// coordinator life that restored an older generation rewinds the acks of
// later generations, so their samples must be committed again; and a
// life that delivers a sample committed before it is caught.
func TestCheckerRewind(t *testing.T) {
	tok := func(gen uint64, step int64) string { return journal.Token{Job: 7, Gen: gen, Step: step}.String() }
	keys := []string{"a", "b", "c", "d"}
	dir := t.TempDir()
	write := func(name string, lines ...string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	node := write("n1.log",
		"session\tn1/0\t1.1",
		"0\tn1/0\t0\ta", "0\tn1/0\t1\tb", "commit\t0\tn1/0\t0", "commit\t0\tn1/0\t1",
		"session\tn1/0\t4.1", // life 2 restored gen 2: step 0 (a) stays, step 1 (b) comes again
		"0\tn1/0\t0\tb", "0\tn1/0\t1\tc", "0\tn1/0\t2\td", "commit\t0\tn1/0\t2")
	for _, tc := range []struct {
		name     string
		coord    []string
		problems []string
	}{
		{"rewound", []string{
			"life\t1\t0",
			"ack\t0\tn1/0\t1.1\t0\t1\t" + tok(2, 0),
			"ack\t0\tn1/0\t1.1\t1\t2\t" + tok(3, 1),
			"life\t4\t2",
			"ack\t0\tn1/0\t4.1\t2\t3\t" + tok(5, 2),
		}, nil},
		{"kept", []string{ // life 2 restored gen 3, yet delivered b again
			"life\t1\t0",
			"ack\t0\tn1/0\t1.1\t0\t1\t" + tok(2, 0),
			"ack\t0\tn1/0\t1.1\t1\t2\t" + tok(3, 1),
			"life\t4\t3",
			"ack\t0\tn1/0\t4.1\t2\t3\t" + tok(5, 2),
		}, []string{"samples more than once", "delivered again"}},
		{"fresh", []string{ // a fresh life rewinds everything: a is missing
			"life\t1\t0",
			"ack\t0\tn1/0\t1.1\t0\t1\t" + tok(2, 0),
			"ack\t0\tn1/0\t1.1\t1\t2\t" + tok(3, 1),
			"life\t4\t0",
			"ack\t0\tn1/0\t4.1\t2\t3\t" + tok(5, 2),
		}, []string{"missing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := readHistory([]string{node}, write(tc.name+".acks", tc.coord...))
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(h.check(keys, 1), "\n")
			if len(tc.problems) == 0 && got != "" {
				t.Errorf("problems:\n%s", got)
			}
			for _, p := range tc.problems {
				if !strings.Contains(got, p) {
					t.Errorf("want a problem mentioning %q; got:\n%s", p, got)
				}
			}
		})
	}
}
