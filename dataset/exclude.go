package dataset

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/longshore/longshore/storage"
)

// Exclusions are sample keys to leave out of a dataset, each with the
// reason it was left out ("" when the list gave none): a quarantine list
// fed back (longshore-node --quarantine writes one, --exclude reads it),
// so a bad sample costs one failure per dataset, not one per epoch.
type Exclusions map[string]string

// ExclusionLine is one line of an exclusion list as a quarantine writes
// it: a JSON object with the key and why it failed. Only Key matters to
// ReadExclusions.
type ExclusionLine struct {
	Key    string `json:"key"`
	Stage  string `json:"stage,omitempty"`
	Class  string `json:"class,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// ReadExclusions reads an exclusion list: one sample a line, either a
// JSON object with a "key" (ExclusionLine, what a quarantine file holds)
// or the key itself, verbatim (a hand-made list; keys may hold spaces).
// Blank lines and lines starting with '#' are skipped; a UTF-8 BOM and
// CRLF line ends are accepted. A line that starts with '{' but is not an
// object with a string "key", or a key no store accepts (CheckKey: a
// typo, or a path instead of a key), is an error naming the line.
func ReadExclusions(r io.Reader) (Exclusions, error) {
	ex := Exclusions{}
	br := bufio.NewReader(r)
	for line := 1; ; line++ {
		text, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("exclusion list: %w", err)
		}
		if line == 1 {
			text = bytes.TrimPrefix(text, []byte("\xef\xbb\xbf"))
		}
		t := bytes.TrimRight(text, "\r\n")
		switch {
		case len(bytes.TrimSpace(t)) == 0 || t[0] == '#':
		case t[0] == '{':
			var l ExclusionLine
			if jerr := json.Unmarshal(t, &l); jerr != nil || l.Key == "" {
				why := "no \"key\""
				if jerr != nil {
					why = jerr.Error()
				}
				return nil, fmt.Errorf("exclusion list line %d: want {\"key\": ...} or a bare key: %s", line, why)
			}
			if err := storage.CheckKey(l.Key); err != nil {
				return nil, fmt.Errorf("exclusion list line %d: %w", line, err)
			}
			ex[l.Key] = l.Reason
		default:
			if err := storage.CheckKey(string(t)); err != nil {
				return nil, fmt.Errorf("exclusion list line %d: %w", line, err)
			}
			ex[string(t)] = ""
		}
		if err == io.EOF {
			return ex, nil
		}
	}
}

// Exclude removes the samples whose keys are in ex from ds, keeping the
// order of the others, the classes (labels do not move) and the objects,
// and returns how many it removed. The dataset's index space, and so the
// epoch order and ManifestDigest, are then those of what is left: every
// process of a cluster must exclude the same keys.
func (ds *Dataset) Exclude(ex Exclusions) int {
	if len(ex) == 0 {
		return 0
	}
	kept := ds.Samples[:0]
	for _, s := range ds.Samples {
		if _, out := ex[s.Key]; !out {
			kept = append(kept, s)
		}
	}
	n := len(ds.Samples) - len(kept)
	clear(ds.Samples[len(kept):]) // drop the removed keys' strings
	ds.Samples = kept
	return n
}
