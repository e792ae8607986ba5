package main

import "testing"

func TestByteSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1234": 1234, "256MiB": 256 << 20, "256mib": 256 << 20, "1.5GiB": 3 << 29,
		"2 KiB": 2048, "500MB": 500e6, "1kb": 1000, "64B": 64, "1TiB": 1 << 40,
	} {
		got, err := parseByteSize(in)
		if err != nil || got != want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1MiB", "12XB", "lots", "1e30GiB", "NaN"} {
		if _, err := parseByteSize(in); err == nil {
			t.Errorf("parseByteSize(%q) accepted", in)
		}
	}
	for v, want := range map[byteSize]string{256 << 20: "256MiB", 1 << 30: "1GiB", 1000: "1000", 0: "0", 3 << 10: "3KiB"} {
		if got := v.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int64(v), got, want)
		}
	}
}
