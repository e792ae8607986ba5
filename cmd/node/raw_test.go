package main

import (
	"bytes"
	"strings"
	"testing"
)

// --media raw takes --raw-max-bytes and refuses what it cannot mean.
func TestRawFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--media", "raw", "--raw-max-bytes", "0"}, "--raw-max-bytes 0"},
		{[]string{"--media", "raw", "--raw-max-bytes", "2GiB"}, "--raw-max-bytes 2147483648"},
		{[]string{"--media", "raw", "--decode-device", "cuda"}, "--media raw decodes nothing"},
		{[]string{"--media", "text"}, "want image, video, audio or raw"},
		{[]string{"--media", "raw:"}, "names no member extension"},
		{[]string{"--media", "image:jpg"}, "only raw names its members"},
	} {
		var out, errb bytes.Buffer
		args := append([]string{"--standalone", "--dataset", t.TempDir()}, c.args...)
		if code := run(args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, want 2 and %q in:\n%s", c.args, code, c.want, errb.String())
		}
	}
	o, err := parseFlags([]string{"--standalone", "--dataset", "x", "--media", "raw", "--raw-max-bytes", "64KiB"}, &bytes.Buffer{})
	if err != nil || int64(o.rawMax) != 64<<10 || o.describeSample() != "raw, up to 65536 bytes a sample" {
		t.Fatalf("%v: raw max %d, %q", err, int64(o.rawMax), o.describeSample())
	}
}
