package main

import (
	"fmt"
	"strconv"
	"strings"
)

// fetchAutoMax is the most reads in flight per rank that
// --fetch-concurrency auto lets the tuner choose: enough for a store
// 50 ms away at ~600 objects/s a rank (actors.Config.FetchAuto).
const fetchAutoMax = 64

// fetchFlag is --fetch-concurrency: auto (the default; the rank picks
// how many reads to keep in flight from the latency and the pace it
// measures, up to fetchAutoMax), auto:N (up to N) or N (fixed).
type fetchFlag struct {
	n    int
	auto bool
}

func (f *fetchFlag) String() string {
	switch {
	case f.auto && f.n == fetchAutoMax:
		return "auto"
	case f.auto:
		return fmt.Sprintf("auto:%d", f.n)
	}
	return strconv.Itoa(f.n)
}

func (f *fetchFlag) Set(s string) error {
	s = strings.TrimSpace(s)
	auto, rest := false, s
	switch {
	case s == "auto":
		f.n, f.auto = fetchAutoMax, true
		return nil
	case strings.HasPrefix(s, "auto:"):
		auto, rest = true, strings.TrimPrefix(s, "auto:")
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 1 {
		return fmt.Errorf("%q: want auto, auto:N (at most N) or N reads in flight per rank, N ≥ 1", s)
	}
	f.n, f.auto = n, auto
	return nil
}
