package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/faultproxy"
	"github.com/longshore/longshore/storage/miniotest"
	"github.com/longshore/longshore/storage/s3"
)

// readQuarantine reads a --quarantine file's lines.
func readQuarantine(t *testing.T, path string) []dataset.ExclusionLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []dataset.ExclusionLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l dataset.ExclusionLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("quarantine line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

func readSummary(t testing.TB, path string) Summary {
	t.Helper()
	var s Summary
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestQuarantineThenExclude: a run over two epochs fails each bad sample
// in each epoch but quarantines it once, with its reason; the next run,
// given the file with --exclude (and as its --quarantine), leaves them
// out of every epoch, fails nothing, delivers the rest once per epoch
// and adds nothing to the file.
func TestQuarantineThenExclude(t *testing.T) {
	root, keys := makeDataset(t, 30)
	bad := map[string]string{
		"c0/zero.jpg":      "",
		"c1/truncated.jpg": "",
		"c2/random.png":    "",
	}
	good, _ := os.ReadFile(filepath.Join(root, keys[0]))
	for k := range bad {
		var data []byte
		switch k {
		case "c1/truncated.jpg":
			data = good[:len(good)/2]
		case "c2/random.png":
			data = randomish(4096)
		}
		if err := os.WriteFile(filepath.Join(root, k), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	q := filepath.Join(dir, "quarantine.jsonl")
	args := func(log, stats string, extra ...string) []string {
		return append([]string{"--standalone", "--dataset", root, "--epochs", "2", "--batch-size", "4", "--size", "32",
			"--seed", "1", "--sink", "log:" + log, "--stats-json", stats, "--progress", "never", "--max-failures", "6"}, extra...)
	}
	var out, errb bytes.Buffer
	log1, stats1 := filepath.Join(dir, "1.log"), filepath.Join(dir, "1.json")
	if code := run(args(log1, stats1, "--quarantine", q), &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	s := readSummary(t, stats1)
	if s.Failures.Total != 6 || s.Quarantined != 3 {
		t.Errorf("first run: %d failures, %d quarantined; want 6 (3 bad samples x 2 epochs) and 3", s.Failures.Total, s.Quarantined)
	}
	lines := readQuarantine(t, q)
	var got []string
	for _, l := range lines {
		got = append(got, l.Key)
		if l.Stage != "decode" || l.Class == "" || l.Reason == "" {
			t.Errorf("quarantine line without stage, class or reason: %+v", l)
		}
	}
	slices.Sort(got)
	if want := []string{"c0/zero.jpg", "c1/truncated.jpg", "c2/random.png"}; !slices.Equal(got, want) {
		t.Fatalf("quarantined %v; want %v", got, want)
	}
	if !strings.Contains(errb.String(), "--exclude "+q) {
		t.Errorf("stderr does not say how to use the quarantine:\n%s", errb.String())
	}

	out.Reset()
	errb.Reset()
	log2, stats2 := filepath.Join(dir, "2.log"), filepath.Join(dir, "2.json")
	if code := run(args(log2, stats2, "--exclude", q, "--quarantine", q, "--max-failures", "0"), &out, &errb); code != 0 {
		t.Fatalf("second run: exit %d\n%s%s", code, out.String(), errb.String())
	}
	s = readSummary(t, stats2)
	if s.Failures.Total != 0 || s.Excluded != 3 || s.Quarantined != 0 || s.Samples != 30 {
		t.Errorf("second run: %d failures, %d excluded, %d quarantined, %d samples; want 0, 3, 0, 30", s.Failures.Total, s.Excluded, s.Quarantined, s.Samples)
	}
	checkOncePerEpoch(t, log2, 2, keys)
	if n := len(readQuarantine(t, q)); n != 3 {
		t.Errorf("the quarantine holds %d lines after the second run; want the same 3", n)
	}
}

func randomish(n int) []byte {
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// uploadDir copies every file under dir to the bucket, keyed by its path.
func uploadDir(t *testing.T, srv *miniotest.Server, bucket, dir string) {
	t.Helper()
	ctx := context.Background()
	s, err := s3.New(ctx, bucket, "", srv.Options())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = s.Put(ctx, filepath.ToSlash(rel), data, storage.Cond{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestStandaloneThroughFaultProxy runs the node over a plain and a packed
// dataset on MinIO behind the fault-injecting proxy. Transient schedules
// (SlowDown bursts with and without Retry-After, 500s, resets, short and
// corrupt bodies, a trickle, silence, a refusal; a wrong Content-Range
// for packed chunks) end with every sample delivered exactly once per
// epoch and the retries counted by cause in --stats-json; 403 and 404 on
// a key set fail exactly those samples, at once, with their reason, and
// quarantine them.
func TestStandaloneThroughFaultProxy(t *testing.T) {
	srv := miniotest.Start(t)
	root, keys := makeDataset(t, 40)
	packedDir, pkeys := packDataset(t, root, keys, 10)
	plainBucket, packedBucket := srv.NewBucket(t), srv.NewBucket(t)
	uploadDir(t, srv, plainBucket, root)
	uploadDir(t, srv, packedBucket, packedDir)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	t.Setenv(s3.EnvEndpointS3, "")
	denied, gone := keys[3], keys[17]
	type tc struct {
		name    string
		rules   []faultproxy.Rule
		packed  bool
		failing map[string]string // key -> class
		cause   func(s3.RetriesByCause) int64
	}
	get := faultproxy.OpGet
	rng := faultproxy.OpGetRange
	cases := []tc{
		{name: "plain/transient", rules: []faultproxy.Rule{
			{Ops: get, Skip: 5, FirstN: 4, Fault: faultproxy.SlowDown(0)},
			{Ops: get, Skip: 12, FirstN: 1, Fault: faultproxy.SlowDown(time.Second)},
			{Ops: get, Skip: 15, FirstN: 2, Fault: faultproxy.Status(500, "InternalError")},
			{Ops: get, Skip: 20, FirstN: 2, Fault: faultproxy.ResetAfter(200)},
			{Ops: get, Skip: 25, FirstN: 2, Fault: faultproxy.ShortBody(10)},
			{Ops: get, Skip: 30, FirstN: 2, Fault: faultproxy.Corrupt(4)},
			{Ops: get, Skip: 35, FirstN: 1, Fault: faultproxy.Trickle(200)},
			{Ops: get, Skip: 45, FirstN: 1, Fault: faultproxy.Silence()},
			{Ops: get, Skip: 50, FirstN: 1, Fault: faultproxy.Refuse(time.Second)},
		}, cause: func(r s3.RetriesByCause) int64 { return min(r.Throttle, r.Server, r.Conn, r.BadResponse, r.Timeout) }},
		{name: "plain/403+404", rules: []faultproxy.Rule{
			{Ops: faultproxy.Reads, Key: faultproxy.Keys(denied), Fault: faultproxy.Status(403, "AccessDenied")},
			{Ops: faultproxy.Reads, Key: faultproxy.Keys(gone), Fault: faultproxy.Status(404, "NoSuchKey")},
		}, failing: map[string]string{denied: "access_denied", gone: "not_found"}},
		{name: "packed/transient", packed: true, rules: []faultproxy.Rule{
			{Ops: rng, FirstN: 2, Fault: faultproxy.SlowDown(0)},
			{Ops: rng, Skip: 2, FirstN: 1, Fault: faultproxy.WrongRange(100)},
			{Ops: rng, Skip: 3, FirstN: 1, Fault: faultproxy.ShortBody(1)},
			{Ops: rng, Skip: 4, FirstN: 1, Fault: faultproxy.ResetAfter(1000)},
		}, cause: func(r s3.RetriesByCause) int64 { return min(r.Throttle, r.BadResponse, r.Conn) }},
		{name: "packed/403 on a shard", packed: true, rules: []faultproxy.Rule{
			{Ops: faultproxy.Reads, Key: faultproxy.Keys("shards/shard-000001.tar"), Fault: faultproxy.Status(403, "AccessDenied")},
		}, failing: func() map[string]string {
			m := map[string]string{}
			for _, k := range pkeys {
				if strings.HasPrefix(k, "shards/shard-000001.tar/") {
					m[k] = "access_denied"
				}
			}
			return m
		}()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := faultproxy.Start(t, srv.Endpoint, c.rules...)
			bucket, want := plainBucket, keys
			if c.packed {
				bucket, want = packedBucket, pkeys
			}
			dir := t.TempDir()
			logPath, statsPath, q := filepath.Join(dir, "d.log"), filepath.Join(dir, "s.json"), filepath.Join(dir, "q.jsonl")
			var out, errb bytes.Buffer
			start := time.Now()
			// Hedging off: the schedule checks each fault is retried as
			// its cause, and a hedged GET (on by default) may answer for
			// the silent request before its timeout retry.
			code := run([]string{"--standalone", "--dataset", "s3://" + bucket + "/", "--s3-endpoint", p.URL,
				"--epochs", "2", "--batch-size", "4", "--size", "32", "--seed", "2", "--sink", "log:" + logPath,
				"--stats-json", statsPath, "--progress", "never", "--max-failures", "30%", "--quarantine", q,
				"--request-timeout", "2s", "--fetch-concurrency", "4", "--hedge-quantile", "0"}, &out, &errb)
			if code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
			}
			s := readSummary(t, statsPath)
			if s.Store == nil {
				t.Fatal("--stats-json has no store figures")
			}
			var delivered []string
			for _, k := range want {
				if _, fails := c.failing[k]; !fails {
					delivered = append(delivered, k)
				}
			}
			checkOncePerEpoch(t, logPath, 2, delivered)
			if int(s.Failures.Total) != 2*len(c.failing) {
				t.Errorf("%d failures; want %d (%d samples x 2 epochs)", s.Failures.Total, 2*len(c.failing), len(c.failing))
			}
			for _, f := range s.Failures.Report.Records {
				if cls, ok := c.failing[f.Key]; !ok || f.Class != cls || f.Stage.String() != "fetch" {
					t.Errorf("failure %+v; want only %v", f, c.failing)
				}
			}
			if len(c.failing) > 0 {
				if s.Store.Retries != 0 {
					t.Errorf("403/404 were retried: %+v", s.Store)
				}
				lines := readQuarantine(t, q)
				if len(lines) != len(c.failing) {
					t.Errorf("quarantined %d keys; want %d", len(lines), len(c.failing))
				}
				for _, l := range lines {
					if c.failing[l.Key] != l.Class {
						t.Errorf("quarantined %+v", l)
					}
				}
			}
			for i := range c.rules {
				if p.Fired(i) == 0 {
					t.Errorf("rule %d (%v) never fired: the schedule did not run", i, c.rules[i].Fault.Kind)
				}
			}
			if c.cause != nil && c.cause(s.Store.RetriesByCause) == 0 {
				t.Errorf("retries by cause %+v: some fault of the schedule was not retried as its cause", s.Store.RetriesByCause)
			}
			t.Logf("NODE | %-22s | %d requests, retries %d (%s), %d throttled | %.2fs | %d samples x 2 epochs, %d failed",
				c.name, s.Store.Requests, s.Store.Retries, retryCauses(s.Store.RetriesByCause), s.Store.Throttled,
				time.Since(start).Seconds(), len(want), s.Failures.Total)
		})
	}
}

func retryCauses(r s3.RetriesByCause) string {
	return fmt.Sprintf("throttle %d, server %d, timeout %d, conn %d, bad %d", r.Throttle, r.Server, r.Timeout, r.Conn, r.BadResponse)
}
