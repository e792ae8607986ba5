package flagenv

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestSet(t *testing.T) {
	env := map[string]string{
		"LONGSHORE_DATASET":      "/env/data",
		"LONGSHORE_COMMIT_EVERY": "7",
		"LONGSHORE_RANKS":        "2",
		"LONGSHORE_STANDALONE":   "true",
		"LONGSHORE_NOT_A_FLAG":   "x",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	dataset := fs.String("dataset", "", "")
	every := fs.Int("commit-every", 1, "")
	ranks := fs.Int("ranks", 1, "")
	standalone := fs.Bool("standalone", false, "")
	if err := Set(fs, lookup); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--ranks", "3"}); err != nil { // the command line wins
		t.Fatal(err)
	}
	if *dataset != "/env/data" || *every != 7 || *ranks != 3 || !*standalone {
		t.Errorf("got dataset %q commit-every %d ranks %d standalone %v", *dataset, *every, *ranks, *standalone)
	}

	env["LONGSHORE_COMMIT_EVERY"] = "many"
	env["LONGSHORE_STEP_TIME"] = "slow"
	fs2 := flag.NewFlagSet("t", flag.ContinueOnError)
	fs2.Int("commit-every", 1, "")
	fs2.Duration("step-time", time.Second, "")
	err := Set(fs2, lookup)
	if err == nil || !strings.Contains(err.Error(), "LONGSHORE_COMMIT_EVERY") || !strings.Contains(err.Error(), "LONGSHORE_STEP_TIME") {
		t.Errorf("bad values: err = %v, want both variables named", err)
	}
	if Name("gossip-advertise") != "LONGSHORE_GOSSIP_ADVERTISE" {
		t.Errorf("Name = %q", Name("gossip-advertise"))
	}
}
