package main

import (
	"io"
	"strings"
	"testing"
)

// TestFlagsFromEnv: LONGSHORE_* variables fill flags, the command line
// wins, unknown variables are ignored, bad values are all reported.
func TestFlagsFromEnv(t *testing.T) {
	t.Setenv("LONGSHORE_DATASET", "/env/data")
	t.Setenv("LONGSHORE_COMMIT_EVERY", "7")
	t.Setenv("LONGSHORE_RANKS", "2")
	t.Setenv("LONGSHORE_STANDALONE", "true")
	t.Setenv("LONGSHORE_NOT_A_FLAG", "x")
	o, err := parseFlags([]string{"--ranks", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.dataset != "/env/data" || o.commitEvery != 7 || o.ranks != 3 || !o.standalone {
		t.Errorf("got dataset %q commit-every %d ranks %d standalone %v", o.dataset, o.commitEvery, o.ranks, o.standalone)
	}
	t.Setenv("LONGSHORE_EPOCHS", "many")
	t.Setenv("LONGSHORE_STEP_TIME", "slow")
	_, err = parseFlags(nil, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "LONGSHORE_EPOCHS") || !strings.Contains(err.Error(), "LONGSHORE_STEP_TIME") {
		t.Errorf("bad values: err = %v, want both variables named", err)
	}
}
