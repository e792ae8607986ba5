package main

import (
	"io"
	"testing"

	"github.com/longshore/longshore/storage"
)

func TestOrderBlockForPackedDatasets(t *testing.T) {
	plain := &storage.Dataset{Samples: []storage.Sample{{Key: "a.jpg"}}}
	packed := &storage.Dataset{Objects: []string{"s.tar"}, Samples: []storage.Sample{{Key: "s.tar/a.jpg", Object: 1, Size: 1}}}
	base := []string{"--dataset", "d", "--listen", "127.0.0.1:1", "--gossip", "127.0.0.1:2"}
	for _, tc := range []struct {
		name          string
		args          []string
		env           string
		plain, packed int
	}{
		{"default", nil, "", 1, packedBlock},
		{"flag", []string{"--block", "64"}, "", 64, 64},
		{"flag 1 keeps a full shuffle", []string{"--block", "1"}, "", 1, 1},
		{"env", nil, "32", 32, 32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("LONGSHORE_BLOCK", tc.env)
			}
			o, err := parseFlags(append(base, tc.args...), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if got := o.orderBlock(plain); got != tc.plain {
				t.Errorf("plain dataset: block %d, want %d", got, tc.plain)
			}
			if got := o.orderBlock(packed); got != tc.packed {
				t.Errorf("packed dataset: block %d, want %d", got, tc.packed)
			}
		})
	}
}
