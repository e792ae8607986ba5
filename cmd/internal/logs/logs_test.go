package logs

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestLogs(t *testing.T) {
	var b bytes.Buffer
	New(&b, FormatAuto, "info", "node").Info("hello", "n", 3) // not a terminal: JSON
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil || m["msg"] != "hello" || m["component"] != "node" || m["n"] != 3.0 {
		t.Errorf("auto off a terminal: %q (%v)", b.String(), err)
	}
	b.Reset()
	l := New(&b, FormatText, "warn", "coordinator")
	l.Info("quiet")
	l.Warn("loud")
	if s := b.String(); strings.Contains(s, "quiet") || !strings.Contains(s, `msg=loud component=coordinator`) {
		t.Errorf("text at warn: %q", s)
	}
	if errs := Check("xml", "chatty"); len(errs) != 2 || !strings.Contains(errs[0].Error(), "--log-format") || !strings.Contains(errs[1].Error(), "--log-level") {
		t.Errorf("Check: %v", errs)
	}
	if errs := Check("json", "DEBUG"); len(errs) != 0 {
		t.Errorf("Check: %v", errs)
	}
}
