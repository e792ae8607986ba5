package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/longshore/longshore/feed"
)

// mixtureLog reads a standalone log sink's lines of a world-rank run
// with batch size b back into the run's stream: stream[epoch][position]
// is the key there (position = rank + offset × world, as the feeders
// take them), padding left out.
func mixtureLog(t *testing.T, path string, world, b int) map[int][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type at struct{ epoch, rank, step int }
	rows := map[at]int{}
	out := map[int][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		e, _ := strconv.Atoi(cols[0])
		r, _ := strconv.Atoi(cols[1])
		s, _ := strconv.Atoi(cols[2])
		k := at{e, r, s}
		off := s*b + rows[k]
		rows[k]++
		if len(cols) > 4 && cols[4] == "pad" {
			continue
		}
		pos := r + off*world
		for len(out[e]) <= pos {
			out[e] = append(out[e], "")
		}
		out[e][pos] = cols[3]
	}
	return out
}

// TestStandaloneMixture: a standalone node over a mixture of two
// ImageFolder directories, weights 0.7 and 0.3 in rounds of the batch
// size: the stream is the same for 1, 2 and 4 ranks; every global batch
// (batch size × ranks) holds exactly 7 of a and 3 of b per 10; and each
// source's samples, in stream order, come exactly once per that source's
// epoch.
func TestStandaloneMixture(t *testing.T) {
	a, aKeys := makeDataset(t, 30)
	b, bKeys := makeDataset(t, 50)
	const epochs, batch = 3, 10
	var ref map[int][]string
	for _, world := range []int{1, 2, 4} {
		logPath := filepath.Join(t.TempDir(), "d.log")
		var out, errb bytes.Buffer
		code := run([]string{"--standalone", "--mixture", "a=" + a + ":0.7,b=file://" + b + ":0.3", "--epochs", strconv.Itoa(epochs),
			"--batch-size", strconv.Itoa(batch), "--ranks", strconv.Itoa(world), "--size", "32", "--seed", "5",
			"--sink", "log:" + logPath, "--progress", "never"}, &out, &errb)
		if code != 0 {
			t.Fatalf("ranks %d: exit %d\n%s", world, code, errb.String())
		}
		if !strings.Contains(errb.String(), "mixture source a: ") || !strings.Contains(errb.String(), "7 of each round of 10") {
			t.Errorf("ranks %d: the start lines do not describe the mixture:\n%s", world, errb.String())
		}
		stream := mixtureLog(t, logPath, world, batch)
		if ref == nil {
			ref = stream
		} else {
			for e := 0; e < epochs; e++ {
				if !slices.Equal(stream[e], ref[e]) {
					t.Errorf("ranks %d, epoch %d: another stream than 1 rank's", world, e)
				}
			}
		}
		for e := 0; e < epochs; e++ {
			if len(stream[e]) != 80 {
				t.Fatalf("ranks %d, epoch %d: %d positions, want 80", world, e, len(stream[e]))
			}
			g := batch * world
			for start := 0; start < 80; start += g {
				na := 0
				for _, k := range stream[e][start : start+g] {
					if strings.HasPrefix(k, "a/") {
						na++
					}
				}
				if na != 7*g/10 {
					t.Errorf("ranks %d, epoch %d, global batch at %d: %d of a in %d, want %d", world, e, start, na, g, 7*g/10)
				}
			}
		}
	}
	// Source by source, in stream order: runs of the source's size are
	// each a permutation of it.
	var all []string
	for e := 0; e < epochs; e++ {
		all = append(all, ref[e]...)
	}
	for _, src := range []struct {
		name  string
		keys  []string
		draws int
	}{{"a", aKeys, epochs * 80 * 7 / 10}, {"b", bKeys, epochs * 80 * 3 / 10}} {
		var drawn []string
		for _, k := range all {
			if rest, ok := strings.CutPrefix(k, src.name+"/"); ok {
				drawn = append(drawn, rest)
			}
		}
		n := len(src.keys)
		if len(drawn) != src.draws {
			t.Errorf("source %s: %d draws, want %d", src.name, len(drawn), src.draws)
		}
		for e := 0; (e+1)*n <= len(drawn); e++ {
			got := slices.Sorted(slices.Values(drawn[e*n : (e+1)*n]))
			if !slices.Equal(got, src.keys) {
				t.Errorf("source %s, its epoch %d: not each of its %d samples once", src.name, e, n)
			}
		}
	}
}

// TestStandaloneMixtureResume: a trainer's token resumes a restarted
// node over the same mixture at the exact stream it left, batch for
// batch; a node over other weights refuses it (another dataset digest
// of the same count) unless --force-resume.
func TestStandaloneMixtureResume(t *testing.T) {
	a, _ := makeDataset(t, 12)
	b, _ := makeDataset(t, 20)
	common := []string{"--epochs", "2", "--batch-size", "4", "--seed", "9", "--mixture-round", "4"}
	mix := func(sched string) []string {
		return append([]string{"--mixture", "a=" + a + ",b=" + b, "--mixture-schedule", sched}, common...)
	}
	sched := "a:1,b:1;a:3,b:1@16"
	type batchKeys struct {
		epoch int
		step  int64
		keys  []string
	}
	take := func(r *feedNode, c *feed.Client, n int, commitAt int) (got []batchKeys, tok []byte) {
		for i := 0; n < 0 || i < n; i++ {
			bt, err := c.Next(r.ctx)
			if err != nil {
				if n < 0 {
					return got, tok
				}
				t.Fatal(err)
			}
			got = append(got, batchKeys{bt.Epoch, bt.Step, slices.Clone(bt.Keys)})
			if i == commitAt {
				if tok, err = c.Commit(r.ctx, bt.Epoch, bt.Step); err != nil {
					t.Fatal(err)
				}
			}
			bt.Release()
		}
		return got, tok
	}
	r := startFeedNode(t, mix(sched)...)
	c, err := r.dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	// The whole run once, with a commit after step 5 of epoch 0: what a
	// trainer that crashed after it had seen, and the rest, which it
	// had not committed.
	full, tok := take(r, c, -1, 5)
	r.drain(c)
	if len(full) != 16 {
		t.Fatalf("%d batches, want 16 (2 epochs of 32 in batches of 4)", len(full))
	}
	for _, bk := range full {
		na := 0
		for _, k := range bk.keys {
			if strings.HasPrefix(k, "a/") {
				na++
			}
		}
		// Positions 0-15 of epoch 0 are half and half; from sample 16 on, 3 of a per round of 4.
		want := 3
		if bk.epoch == 0 && bk.step < 4 {
			want = 2
		}
		if na != want {
			t.Errorf("epoch %d step %d: %d of a in %v, want %d", bk.epoch, bk.step, na, bk.keys, want)
		}
	}

	r = startFeedNode(t, mix(sched)...)
	c, err = r.dial(tok)
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	rest, _ := take(r, c, -1, -1)
	r.drain(c)
	if fmt.Sprint(rest) != fmt.Sprint(full[6:]) {
		t.Errorf("resumed after step 5:\n%v\nwant the first run's\n%v", rest, full[6:])
	}

	// The same mixture spelled as a file (its weights written otherwise):
	// the same digest, so the token
	// resumes without --force-resume, to the same rest.
	file := filepath.Join(t.TempDir(), "mix.yaml")
	if err := os.WriteFile(file, []byte("sources:\n  - {name: a, dataset: "+a+"}\n  - {name: b, dataset: "+b+"}\n"+
		"schedule:\n  - weights: {a: 0.5, b: 1/2}\n  - {at: 16, ramp: step, weights: {a: 3/4, b: 0.25}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = startFeedNode(t, append([]string{"--mixture", file}, common...)...)
	c, err = r.dial(tok)
	if err != nil {
		t.Fatalf("resume with the mixture as a file: %v", err)
	}
	rest, _ = take(r, c, -1, -1)
	r.drain(c)
	if fmt.Sprint(rest) != fmt.Sprint(full[6:]) {
		t.Errorf("resumed from the file after step 5:\n%v\nwant the first run's\n%v", rest, full[6:])
	}

	r = startFeedNode(t, mix("a:1,b:1;a:1,b:3@16")...)
	if c, err := r.dial(tok); err == nil || !strings.Contains(err.Error(), "dataset digest") || !strings.Contains(err.Error(), "--force-resume") {
		t.Errorf("other weights: %v, want bad_token naming the dataset digest and --force-resume", err)
		if err == nil {
			c.Close()
		}
	}
	c, err = r.dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	r.drain(c)

	r = startFeedNode(t, append(mix("a:1,b:1;a:1,b:3@16"), "--force-resume")...)
	c, err = r.dial(tok)
	if err != nil {
		t.Fatalf("other weights, --force-resume: %v", err)
	}
	r.drain(c)
}

// TestStandaloneMixtureFileRound: a file's round: is --mixture-round:
// a job started with the flag resumes from a file that says round: (the
// flag left out) without --force-resume, to the same rest, and back; a
// file without round: (the batch size's round) is another mixture.
func TestStandaloneMixtureFileRound(t *testing.T) {
	a, _ := makeDataset(t, 12)
	b, _ := makeDataset(t, 20)
	common := []string{"--epochs", "2", "--batch-size", "4", "--seed", "9"}
	flags := append([]string{"--mixture", "a=" + a + ":1,b=" + b + ":3", "--mixture-round", "8"}, common...)
	dir := t.TempDir()
	file := func(name, round string) []string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("sources:\n  - {name: a, dataset: "+a+", weight: 1}\n  - {name: b, dataset: "+b+", weight: 3}\n"+round), 0o644); err != nil {
			t.Fatal(err)
		}
		return append([]string{"--mixture", path}, common...)
	}
	withRound, noRound := file("round.yaml", "round: 8\n"), file("plain.yaml", "")
	take := func(r *feedNode, c *feed.Client, commitAt int) (got []string, tok []byte) {
		for i := 0; ; i++ {
			bt, err := c.Next(r.ctx)
			if err != nil {
				return got, tok
			}
			got = append(got, fmt.Sprint(bt.Epoch, bt.Step, bt.Keys))
			if i == commitAt {
				if tok, err = c.Commit(r.ctx, bt.Epoch, bt.Step); err != nil {
					t.Fatal(err)
				}
			}
			bt.Release()
		}
	}
	r := startFeedNode(t, flags...)
	c, err := r.dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	full, tok := take(r, c, 2)
	r.drain(c)
	if len(full) != 16 {
		t.Fatalf("%d batches, want 16 (2 epochs of 32 in batches of 4)", len(full))
	}

	// The file with round: 8, no --mixture-round: the token resumes.
	r = startFeedNode(t, withRound...)
	c, err = r.dial(tok)
	if err != nil {
		t.Fatalf("resume with round: in the file: %v", err)
	}
	rest, tok2 := take(r, c, 2)
	r.drain(c)
	if fmt.Sprint(rest) != fmt.Sprint(full[3:]) {
		t.Errorf("resumed from the file's round:\n%v\nwant the first run's\n%v", rest, full[3:])
	}
	// And back: the file's token resumes under the flag.
	r = startFeedNode(t, flags...)
	c, err = r.dial(tok2)
	if err != nil {
		t.Fatalf("resume with --mixture-round from the file's token: %v", err)
	}
	rest, _ = take(r, c, -1)
	r.drain(c)
	if fmt.Sprint(rest) != fmt.Sprint(full[6:]) {
		t.Errorf("resumed under the flag:\n%v\nwant the first run's\n%v", rest, full[6:])
	}

	// Without round: the round is the batch size's, 4: another digest.
	r = startFeedNode(t, noRound...)
	if c, err := r.dial(tok); err == nil || !strings.Contains(err.Error(), "dataset digest") {
		t.Errorf("a file without round:: %v, want the token refused for its dataset digest", err)
		if err == nil {
			c.Close()
		}
	}
	if c, err = r.dial(nil); err != nil {
		t.Fatal(err)
	}
	r.drain(c)
}

// TestMixtureFlagErrors: --mixture's mistakes are named at start.
func TestMixtureFlagErrors(t *testing.T) {
	badFile := filepath.Join(t.TempDir(), "bad.yml")
	if err := os.WriteFile(badFile, []byte("sources:\n  - {name: a, dataset: /a, wieght: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	roundFile := filepath.Join(t.TempDir(), "round.yaml")
	if err := os.WriteFile(roundFile, []byte("sources: [{name: a, dataset: /a, weight: 1}]\nround: 8\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badRound := filepath.Join(t.TempDir(), "badround.yaml")
	if err := os.WriteFile(badRound, []byte("sources:\n  - {name: a, dataset: /a, weight: 1}\nround: eight\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mixture", "a=/x:1", "--dataset", "/y"}, "in place of --dataset"},
		{[]string{"--mixture", "a=/x"}, `source "a" has no weight`},
		{[]string{"--mixture", "a=/x:1", "--mixture-schedule", "a:1"}, "give them in one place"},
		{[]string{"--mixture", "a=/x,b=/y", "--mixture-schedule", "a:1,c:1"}, `no source "c"`},
		{[]string{"--mixture", "junk"}, "want name=DATASET:WEIGHT"},
		{[]string{"--mixture-schedule", "a:1", "--dataset", "/y"}, "need --mixture"},
		{[]string{"--mixture", "/nowhere/mix.yaml"}, "no such file"},
		{[]string{"--mixture", badFile, "--mixture-schedule", "a:1"}, "the file gives the schedule"},
		{[]string{"--mixture", badFile}, badFile + ":2: wieght: no such key"},
		{[]string{"--mixture", roundFile, "--mixture-round", "4"}, "--mixture-round 4 and --mixture " + roundFile + ":2: round: 8 disagree"},
		{[]string{"--mixture", roundFile, "--mixture-round", "0"}, "--mixture-round 0 and --mixture " + roundFile + ":2: round: 8 disagree"},
		{[]string{"--mixture", badRound}, badRound + ":3: round: \"eight\": want a whole number >= 1"},
	} {
		var errb bytes.Buffer
		code := run(append([]string{"--standalone", "--progress", "never"}, tc.args...), &bytes.Buffer{}, &errb)
		if code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 naming %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

// TestStandaloneMixtureCounts: the summary (printed and --stats-json)
// counts each source's samples, the positions of each the mixture drew:
// 0.7 and 0.3 of 3 epochs of 80 positions, at 1 rank (no padding).
func TestStandaloneMixtureCounts(t *testing.T) {
	a, _ := makeDataset(t, 30)
	b, _ := makeDataset(t, 50)
	stats := filepath.Join(t.TempDir(), "stats.json")
	var out, errb bytes.Buffer
	code := run([]string{"--standalone", "--mixture", "a=" + a + ":0.7,b=" + b + ":0.3", "--epochs", "3",
		"--batch-size", "10", "--size", "32", "--seed", "5", "--sink", "null", "--progress", "never", "--stats-json", stats}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	for _, line := range []string{"mixture       a: 168 samples (70.0%)", "mixture       b: 72 samples (30.0%)"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("the summary lacks %q:\n%s", line, out.String())
		}
	}
	raw, err := os.ReadFile(stats)
	if err != nil {
		t.Fatal(err)
	}
	var s Summary
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(s.Mixture); got != "[{a 168} {b 72}]" {
		t.Errorf("--stats-json mixture %s, want [{a 168} {b 72}]", got)
	}
}

// TestStandaloneMixtureExclude: --exclude with a mixture takes the
// mixture's keys (<source>/<key>, as --quarantine writes them, JSON lines
// or bare): each source leaves out its own, and nothing else; a key of
// no source is refused, naming it.
func TestStandaloneMixtureExclude(t *testing.T) {
	a, aKeys := makeDataset(t, 30)
	b, bKeys := makeDataset(t, 50)
	dir := t.TempDir()
	gone := map[string]bool{"a/" + aKeys[3]: true, "a/" + aKeys[17]: true, "b/" + bKeys[0]: true}
	excl := filepath.Join(dir, "exclude")
	text := fmt.Sprintf("{\"key\": %q, \"reason\": \"decode/corrupt\"}\n%s\n%s\n", "a/"+aKeys[3], "a/"+aKeys[17], "b/"+bKeys[0])
	if err := os.WriteFile(excl, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "d.log")
	var out, errb bytes.Buffer
	code := run([]string{"--standalone", "--mixture", "a=" + a + ":0.5,b=" + b + ":0.5", "--epochs", "3", "--batch-size", "10",
		"--size", "32", "--sink", "log:" + logPath, "--progress", "never", "--exclude", excl}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	seen := map[string]bool{}
	for _, keys := range mixtureLog(t, logPath, 1, 10) {
		for _, k := range keys {
			if gone[k] {
				t.Errorf("%s was excluded and delivered", k)
			}
			seen[k] = true
		}
	}
	for _, src := range []struct {
		name string
		keys []string
	}{{"a", aKeys}, {"b", bKeys}} {
		for _, k := range src.keys {
			if !gone[src.name+"/"+k] && !seen[src.name+"/"+k] {
				t.Errorf("%s/%s not excluded, never delivered", src.name, k)
			}
		}
	}
	if err := os.WriteFile(excl, []byte("c/x.jpg\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	code = run([]string{"--standalone", "--mixture", "a=" + a + ":0.5,b=" + b + ":0.5", "--sink", "null", "--progress", "never", "--exclude", excl}, &out, &errb)
	if code == 0 || !strings.Contains(errb.String(), `"c/x.jpg" names no source`) {
		t.Errorf("an excluded key of no source: exit %d, %q; want it refused naming the key", code, errb.String())
	}
}
