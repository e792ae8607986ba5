package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"syscall"
	"testing"
	"time"
)

// videoDataset is an ImageFolder of n video clips, two classes, made of
// copies of the committed test clips (testdata/media, made by
// scripts/media) that Debian's FFmpeg decodes fast: H.264 in MP4 and
// MKV, and VP9 in WebM.
func videoDataset(t *testing.T, n int) (string, []string) {
	t.Helper()
	srcs := []string{"cfr_h264.mp4", "vfr_h264.mkv", "vp9.webm", "short_h264.mp4"}
	dir := t.TempDir()
	var keys []string
	for i := range n {
		src := srcs[i%len(srcs)]
		data, err := os.ReadFile(filepath.Join("..", "testdata", "media", src))
		if err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("c%d/clip%03d%s", i%2, i, filepath.Ext(src))
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(key)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, key), data, 0o644); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	sort.Strings(keys)
	return dir, keys
}

// TestClusterVideoKillNode: --media video in cluster mode over an
// ImageFolder of clips (the coordinator lists it with --media video), a
// node killed with SIGKILL mid-epoch: every clip is in committed history
// exactly once per epoch, as for images.
func TestClusterVideoKillNode(t *testing.T) {
	dir, keys := videoDataset(t, 40)
	c := startCluster(t, job{dataset: dir, epochs: 2, batch: 2, shard: 4, balance: "equal", commit: 1, minRanks: 4,
		stepTime: 50 * time.Millisecond, extraCoord: []string{"--media", "video"}})
	media := []string{"--media", "video", "--clip-frames", "4", "--clip-sampling", "random", "--clip-fps", "8",
		"--transform", "train", "--size", "32", "--video-threads", "1"}
	c.addNode(media...)
	victim := c.addNode(media...)
	// Mid-epoch: once the victim delivered a few batches of epoch 0.
	waitLines(t, c.nodeLogs[1], regexp.MustCompile(`(?m)^0\tn2/\d\t2\t`), 1, 2*time.Minute)
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-victim.done
	c.finish(victim)
	h := c.history(keys)
	delivered := map[int]int{}
	for k, ss := range h.delivered {
		delivered[k.epoch] += len(ss)
	}
	if len(c.coordEvents("node failed")) == 0 {
		t.Errorf("the coordinator never noticed the kill")
	}
	t.Logf("clips delivered per epoch, padding and re-issued ones included: %v (%d clips)", delivered, len(keys))
}
