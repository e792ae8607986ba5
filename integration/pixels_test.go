package integration

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// realPhotos returns the cached dataset of 512 JPEGs cut from real
// photographs (scripts/dataset.sh), making it if needed.
func realPhotos(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("../scripts/dataset.sh", "512").Output()
	if err != nil {
		t.Fatalf("scripts/dataset.sh 512: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// pixelFlags make a node decode like a trainer's job (the real FFmpeg and
// libjpeg-turbo decoders, the train transform's random crop and flip)
// and log each sample's pixel digest.
var pixelFlags = []string{"--transform", "train", "--size", "32", "--log-pixels", "--decoders", "2"}

const pixelSeed, pixelEpochs, pixelBatch = 11, 3, 8

// standalonePixels runs the job standalone and returns every sample's
// pixel digest per epoch and key.
func standalonePixels(t *testing.T, dataset string) map[int]map[string]string {
	t.Helper()
	_, nodeBin := binaries(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "standalone.log")
	args := append([]string{"--standalone", "--dataset", dataset, "--epochs", strconv.Itoa(pixelEpochs),
		"--seed", strconv.Itoa(pixelSeed), "--batch-size", strconv.Itoa(pixelBatch), "--sink", "log:" + log,
		"--progress", "never"}, pixelFlags...)
	if out, err := exec.Command(nodeBin, args...).CombinedOutput(); err != nil {
		t.Fatalf("standalone run: %v\n%s", err, out)
	}
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	px := map[int]map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		e, _, _, s, ok := parseDelivery(strings.Split(sc.Text(), "\t"))
		if !ok || s.px == "" {
			t.Fatalf("standalone log: bad line %q", sc.Text())
		}
		if s.pad {
			continue
		}
		if px[e] == nil {
			px[e] = map[string]string{}
		}
		if old, ok := px[e][s.key]; ok {
			t.Fatalf("standalone: epoch %d delivered %s twice (%s, %s)", e, s.key, old, s.px)
		}
		px[e][s.key] = s.px
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return px
}

// comparePixels reports every committed sample of a cluster run whose
// pixels differ from the standalone run's.
func comparePixels(t *testing.T, name string, want, got map[int]map[string]string) {
	t.Helper()
	diff, n := 0, 0
	var first []string
	for e, m := range got {
		for k, px := range m {
			n++
			if want[e][k] != px {
				diff++
				if len(first) < 5 {
					first = append(first, "epoch "+strconv.Itoa(e)+" "+k+": "+px+", standalone "+want[e][k])
				}
			}
		}
	}
	sort.Strings(first)
	t.Logf("%s: %d committed samples compared, %d differ from the standalone run", name, n, diff)
	if diff > 0 {
		t.Errorf("%s: %d of %d committed samples have other pixels than the same job standalone, e.g.\n  %s", name, diff, n, strings.Join(first, "\n  "))
	}
}

// TestPixelsSameEverywhere is the metamorphic test of the seed promise:
// the same job (dataset of real photographs, seed, epochs, batch size,
// the train transform's random crop and flip, the real decoders) run
// standalone and as a cluster of 1, 2 and 3 nodes, and again with a node
// killed and restarted mid-epoch, delivers byte-identical pixels for
// every (epoch, sample) in committed history; and a sample's pixels
// differ between epochs (its crop is drawn per epoch). The restarted node's
// sessions begin in epoch 1, and the survivors take the victim's
// uncommitted work of epoch 1 back after they moved on to epoch 2: the
// two ways a node's numbering of its runs can part from the job's epochs.
func TestPixelsSameEverywhere(t *testing.T) {
	dataset := realPhotos(t)
	ref := standalonePixels(t, dataset)
	var keys []string
	for k := range ref[0] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for e := range pixelEpochs {
		if len(ref[e]) != len(keys) || len(keys) != 512 {
			t.Fatalf("standalone run delivered %d samples in epoch %d, %d in epoch 0, want 512", len(ref[e]), e, len(keys))
		}
	}
	same := 0
	for _, k := range keys {
		if ref[0][k] == ref[1][k] {
			same++
		}
	}
	t.Logf("standalone: %d of %d samples have the same pixels in epochs 0 and 1", same, len(keys))
	if same > len(keys)/20 {
		t.Errorf("%d of %d samples have the same pixels in both epochs: crops are not drawn per epoch", same, len(keys))
	}

	j := job{dataset: dataset, epochs: pixelEpochs, batch: pixelBatch, shard: 16, balance: "equal", commit: 2}
	run := func(name string, nodes int, chaos func(c *cluster) []*proc) {
		t.Helper()
		jj := j
		jj.minRanks, jj.stepTime = 2*nodes, 20*time.Millisecond
		if chaos != nil {
			jj.stepTime = 80 * time.Millisecond
		}
		c := startCluster(t, jj)
		for range nodes {
			c.addNode(pixelFlags...)
		}
		var killed []*proc
		if chaos != nil {
			killed = chaos(c)
		}
		c.finish(killed...)
		h := c.history(keys)
		got, problems := h.committedPixels()
		for _, p := range problems {
			t.Errorf("%s: %s", name, p)
		}
		comparePixels(t, name, ref, got)
	}
	for _, nodes := range []int{1, 2, 3} {
		run(strconv.Itoa(nodes)+" node(s)", nodes, nil)
	}
	run("2 nodes, one killed and restarted in epoch 1", 2, func(c *cluster) []*proc {
		victim := c.nodes[1]
		waitLines(t, c.nodeLogs[1], regexp.MustCompile(`(?m)^1\tn2/\d\t2\t`), 1, time.Minute)
		if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-victim.done
		c.restartNode(1)
		return []*proc{victim}
	})
}
