package dataset_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longshore/longshore/dataset"
)

// TestHostileManifests: each malformed manifest of testdata/hostile
// (scripts/hostile/make.py) is refused as a whole, naming its line and
// what is wrong (a manifest is configuration, not data: a run that read
// part of it would train on another dataset than the one named, and
// every process of a cluster must read the same one); a BOM, CRLF line
// ends and keys with spaces or non-ASCII letters are read.
func TestHostileManifests(t *testing.T) {
	dir := "../testdata/hostile/manifests"
	for _, tc := range []struct {
		file    string
		samples int    // when it is read
		err     string // when it is refused
	}{
		{"ok_bom_crlf.csv", 2, ""},
		{"ok_odd_keys.jsonl", 2, ""},
		{"bad_line.csv", 0, "manifest line 2: want 2 fields (key,label) or 5 (key,label,object,offset,size), got 3"},
		{"missing_label.csv", 0, "manifest line 2: want 2 fields (key,label) or 5 (key,label,object,offset,size), got 1"},
		{"missing_label.jsonl", 0, `manifest line 2: no "label"`},
		{"duplicate_key.csv", 0, `manifest line 3: key "legal/png_rgb.png" already on line 1`},
		{"label_out_of_range.csv", 0, "manifest line 2: label 99999999999 outside [0, 1048576)"},
		{"negative_label.csv", 0, "manifest line 1: label -1 outside [0, 1048576)"},
		{"dotdot_key.csv", 0, `manifest line 2: key "../escape.jpg": contains a "." or ".." component`},
		{"leading_slash_key.csv", 0, `manifest line 1: key "/etc/passwd": absolute (starts with '/')`},
		{"bad_json.jsonl", 0, "manifest line 2: not a JSON object"},
		{"empty.csv", 0, "empty"},
	} {
		f, err := os.Open(filepath.Join(dir, tc.file))
		if err != nil {
			t.Fatal(err)
		}
		format, err := dataset.ManifestFormatOf(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		ds, err := dataset.ParseManifest(f, format)
		f.Close()
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v; want %d samples", tc.file, err, tc.samples)
		case tc.err == "" && len(ds.Samples) != tc.samples:
			t.Errorf("%s: %d samples; want %d", tc.file, len(ds.Samples), tc.samples)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %v; want an error saying %q", tc.file, err, tc.err)
		case tc.err != "" && !errors.Is(err, dataset.ErrBadManifest) && !errors.Is(err, dataset.ErrEmptyDataset):
			t.Errorf("%s: %v is neither ErrBadManifest nor ErrEmptyDataset", tc.file, err)
		}
		outcome := "read"
		if err != nil {
			outcome = "refused: " + err.Error()
		}
		t.Logf("HOSTILE | manifests/%-24s | %s", tc.file, outcome)
	}
}
