package storage

import (
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Location
		err  string
	}{
		{"/data/imagenet", Location{Scheme: "file", Path: "/data/imagenet"}, ""},
		{"rel/dir", Location{Scheme: "file", Path: "rel/dir"}, ""},
		{"file:///data/x", Location{Scheme: "file", Path: "/data/x"}, ""},
		{"file://localhost/data/x", Location{Scheme: "file", Path: "/data/x"}, ""},
		{"s3://bucket", Location{Scheme: "s3", Bucket: "bucket"}, ""},
		{"s3://bucket/", Location{Scheme: "s3", Bucket: "bucket"}, ""},
		{"s3://bucket/train/x", Location{Scheme: "s3", Bucket: "bucket", Prefix: "train/x/"}, ""},
		{"S3://bucket/p/", Location{Scheme: "s3", Bucket: "bucket", Prefix: "p/"}, ""},
		{"", Location{}, "empty"},
		{"s3:///p", Location{}, "no bucket"},
		{"s3://b/../p", Location{}, "invalid key"},
		{"file://otherhost/x", Location{}, "local path"},
		{"gs://b/p", Location{}, "unsupported scheme"},
	} {
		got, err := ParseURL(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseURL(%q) = %+v, %v; want error containing %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestCheckKey(t *testing.T) {
	for _, k := range []string{"a", "a/b/c.jpg", "..a", "a..", "a/.b", "é/ü", "a b", strings.Repeat("x", MaxKeyLen)} {
		if err := CheckKey(k); err != nil {
			t.Errorf("CheckKey(%q) = %v", k, err)
		}
	}
	for _, k := range []string{"", "/a", "a/", "a//b", ".", "..", "a/../b", "a/./b", "\xff", "a\x00", strings.Repeat("x", MaxKeyLen+1), ".longshore-x", "a/.longshore-lock"} {
		if err := CheckKey(k); err == nil {
			t.Errorf("CheckKey(%q) accepted", k)
		}
	}
}
