package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/longshore/longshore/dataset"
)

// makeDataset writes n JPEGs of varied sizes in ImageFolder layout (3
// classes), so that crops differ from sample to sample.
func makeDataset(t *testing.T, n int) string {
	t.Helper()
	root := t.TempDir()
	for i := 0; i < n; i++ {
		cls := fmt.Sprintf("c%d", i%3)
		img := image.NewRGBA(image.Rect(0, 0, 40+(i*7)%57, 36+(i*5)%43))
		for y := 0; y < img.Bounds().Dy(); y++ {
			for x := 0; x < img.Bounds().Dx(); x++ {
				img.Set(x, y, color.RGBA{uint8(x * 4), uint8(y * 5), uint8(i * 3), 255})
			}
		}
		var buf bytes.Buffer
		if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(root, cls), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, cls, fmt.Sprintf("img%03d.jpg", i)), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

var (
	nodeOnce sync.Once
	nodeBin  string
	nodeErr  error
)

// node builds the real longshore-node once.
func node(t *testing.T) string {
	t.Helper()
	nodeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "lineage-node")
		if err != nil {
			nodeErr = err
			return
		}
		nodeBin = filepath.Join(dir, "longshore-node")
		if out, err := exec.Command("go", "build", "-o", nodeBin, "../node").CombinedOutput(); err != nil {
			nodeErr = fmt.Errorf("go build ../node: %v\n%s", err, out)
		}
	})
	if nodeErr != nil {
		t.Fatal(nodeErr)
	}
	return nodeBin
}

// delivered is one line of the node's delivery log.
type delivered struct {
	key   string
	pad   bool
	short bool // a clip shorter than its window
	px    string
}

type stepID struct {
	epoch, rank int
	step        int64
}

// readLog parses a standalone delivery log (--sink log:PATH --log-pixels):
// each step's samples in slot order.
func readLog(t *testing.T, path string) map[stepID][]delivered {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[stepID][]delivered{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Split(sc.Text(), "\t")
		if len(fs) < 5 || !strings.HasPrefix(fs[len(fs)-1], "px:") {
			t.Fatalf("log line %q: want epoch, rank, step, key, [pad,] px:", sc.Text())
		}
		e, err1 := strconv.Atoi(fs[0])
		r, err2 := strconv.Atoi(fs[1])
		s, err3 := strconv.ParseInt(fs[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("log line %q", sc.Text())
		}
		id := stepID{e, r, s}
		d := delivered{key: fs[3], px: strings.TrimPrefix(fs[len(fs)-1], "px:")}
		for _, f := range fs[4 : len(fs)-1] {
			d.pad = d.pad || f == "pad"
			d.short = d.short || f == "short"
		}
		got[id] = append(got[id], d)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

func lineage(t *testing.T, args ...string) *Answer {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(context.Background(), append(args, "--json"), &out, &errb); code != 0 {
		t.Fatalf("longshore-lineage %s: exit %d\n%s", strings.Join(args, " "), code, errb.String())
	}
	var a Answer
	if err := json.Unmarshal(out.Bytes(), &a); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	return &a
}

// lineageText is lineage's text answer for args.
func lineageText(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	return out.String()
}

// runNode runs longshore-node on the standalone job args (two decoders,
// no progress) with a delivery log of pixel digests, and returns the log.
func runNode(t *testing.T, args ...string) map[stepID][]delivered {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "d.log")
	cmd := exec.Command(node(t), slices.Concat(args, []string{"--standalone", "--sink", "log:" + logPath, "--log-pixels", "--progress", "never", "--decoders", "2"})...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("longshore-node %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return readLog(t, logPath)
}

// logSteps compares the steps lineage answered with the delivery log's:
// a step whose sample count is not the log's is fatal; in each slot
// lineage must have the log's key and pixel digest, no error and, with
// pad, the log's padding; slot, if set, checks more of slot i of step
// si. It returns how many steps it compared.
func logSteps(t *testing.T, log map[stepID][]delivered, steps []Step, pad bool, slot func(s Step, si, i int, x Sample, w delivered)) int {
	t.Helper()
	for si, s := range steps {
		want := log[stepID{s.Epoch, s.Rank, s.Step}]
		if len(s.Samples) != len(want) {
			t.Fatalf("epoch %d rank %d step %d: lineage has %d samples, the log %d", s.Epoch, s.Rank, s.Step, len(s.Samples), len(want))
		}
		for i, x := range s.Samples {
			w := want[i]
			if x.Key != w.key || (pad && x.Pad != w.pad) || x.Pixels != w.px || x.Error != "" {
				t.Errorf("epoch %d rank %d step %d slot %d: lineage %s pad=%v px:%s %s, the log %s pad=%v px:%s",
					s.Epoch, s.Rank, s.Step, i, x.Key, x.Pad, x.Pixels, x.Error, w.key, w.pad, w.px)
			}
			if slot != nil {
				slot(s, si, i, x, w)
			}
		}
	}
	return len(steps)
}

// logKeys is where the delivery log has each key.
func logKeys(log map[stepID][]delivered) map[string][]stepID {
	where := map[string][]stepID{}
	for id, ds := range log {
		for _, d := range ds {
			where[d.key] = append(where[d.key], id)
		}
	}
	return where
}

// logAppearances asks lineage (the job args, --key) for each key of where:
// it must name the key's places in the log, and no other.
func logAppearances(t *testing.T, log map[stepID][]delivered, where map[string][]stepID, args ...string) {
	t.Helper()
	for key, ids := range where {
		a := lineage(t, slices.Concat(args, []string{"--key", key})...)
		if len(a.Appearances) != len(ids) {
			t.Fatalf("--key %s: %d appearances %v, the log %d %v", key, len(a.Appearances), a.Appearances, len(ids), ids)
		}
		for _, h := range a.Appearances {
			d := log[stepID{h.Epoch, h.Rank, h.Step}]
			if h.Slot >= len(d) || d[h.Slot].key != key || d[h.Slot].pad != h.Pad {
				t.Fatalf("--key %s: appearance %+v is not in the log", key, h)
			}
		}
	}
}

// TestMatchesDeliveryLog runs a real standalone job with a delivery log
// of keys and pixel digests, then asks lineage about every (epoch, rank,
// step) from the job's config file alone: the keys, their order, the
// padding and each sample's pixels (so its crop box and flip: the digest
// is of the decoded, cropped, flipped sample) must match the log, and
// --key must find every place the log shows a key.
func TestMatchesDeliveryLog(t *testing.T) {
	root := makeDataset(t, 71)
	dir := t.TempDir()
	// The node's config file, with keys lineage does not take.
	cfg := filepath.Join(dir, "job.yaml")
	yaml := fmt.Sprintf("dataset: %s\nepochs: 2\nbatch-size: 8\nranks: 3\ntransform: train\nsize: 32\nseed: 7\nblock: 4\nmix-window: 2\n"+
		"decoders: 2\nprogress: never\n", root)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	log := runNode(t, "--config", cfg)

	answered := 0
	for e := 0; e < 2; e++ {
		for r := 0; r < 3; r++ {
			a := lineage(t, "--config", cfg, "--epoch", strconv.Itoa(e), "--rank", strconv.Itoa(r), "--steps", "0-2")
			if a.Job.Steps != 3 || a.Job.StreamLen != 24 || a.Job.Samples != 71 {
				t.Fatalf("job %+v: want 71 samples, 24 a rank, 3 steps", a.Job)
			}
			answered += logSteps(t, log, a.Steps, true, func(s Step, _, i int, x Sample, _ delivered) {
				if x.Crop == nil || x.Flip == nil || x.Crop.W < 1 || x.Crop.X+x.Crop.W > x.Width || x.Crop.Y+x.Crop.H > x.Height {
					t.Errorf("epoch %d rank %d step %d slot %d: crop %v in %dx%d", s.Epoch, s.Rank, s.Step, i, x.Crop, x.Width, x.Height)
				}
			})
		}
	}
	if answered != len(log) {
		t.Fatalf("lineage answered %d steps, the log has %d", answered, len(log))
	}

	// The text form says the same.
	text := lineageText(t, "--config", cfg, "--epoch", "1", "--rank", "2", "--step", "2")
	t.Logf("longshore-lineage --config job.yaml --epoch 1 --rank 2 --step 2:\n%s", text)
	want := log[stepID{1, 2, 2}]
	if !strings.Contains(text, fmt.Sprintf("epoch 1 rank 2 step 2: %d samples", len(want))) {
		t.Errorf("text answer lacks the step's line:\n%s", text)
	}
	for i, d := range want {
		if !strings.Contains(text, fmt.Sprintf("%3d  index", i)) || !strings.Contains(text, d.key) || !strings.Contains(text, "px:"+d.px) {
			t.Errorf("text answer lacks slot %d, %s px:%s:\n%s", i, d.key, d.px, text)
		}
	}

	// Questions the job has no answer to are usage errors, named.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--steps", "2-3"}, "steps 2-3: each rank has steps 0..2 of an epoch (24 samples a rank, batch size 8)"},
		{[]string{"--key", "c0/nope.jpg"}, `key "c0/nope.jpg" is not in the dataset`},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), append([]string{"--config", cfg}, c.args...), &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}

	// The reverse, for every key of the dataset.
	where := logKeys(log)
	if len(where) != 71 {
		t.Fatalf("the log holds %d keys, want 71", len(where))
	}
	logAppearances(t, log, where, "--config", cfg)
}

// TestClipsMatchDeliveryLog: --media video, random windows and crops: the
// clips lineage decodes with the frame times it reports are the ones the
// node delivered (pixel digests), the short clip is marked short, and
// each clip's frame times are its frames' (ascending, one per frame).
func TestClipsMatchDeliveryLog(t *testing.T) {
	root := t.TempDir()
	for class, names := range map[string][]string{
		"a": {"cfr_h264.mp4", "vfr_h264.mkv", "short_h264.mp4"},
		"b": {"hevc.mp4", "vp9.webm", "av1.mkv"},
	} {
		if err := os.MkdirAll(filepath.Join(root, class), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			b, err := os.ReadFile(filepath.Join("../../testdata/media", n))
			if err != nil {
				t.Fatalf("%v (scripts/mkmedia.sh makes it)", err)
			}
			if err := os.WriteFile(filepath.Join(root, class, n), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	job := []string{"--dataset", root, "--media", "video", "--transform", "train", "--clip-frames", "4", "--clip-fps", "5",
		"--clip-sampling", "random", "--size", "32", "--epochs", "2", "--ranks", "2", "--batch-size", "2", "--seed", "5"}
	log := runNode(t, job...)
	answered, short := 0, 0
	for e := 0; e < 2; e++ {
		for r := 0; r < 2; r++ {
			a := lineage(t, append(job, "--epoch", strconv.Itoa(e), "--rank", strconv.Itoa(r), "--steps", "0-1")...)
			answered += logSteps(t, log, a.Steps, true, func(s Step, _, i int, x Sample, w delivered) {
				if x.Short != w.short {
					t.Errorf("epoch %d rank %d step %d slot %d: lineage %s short=%v, the log short=%v", s.Epoch, s.Rank, s.Step, i, x.Key, x.Short, w.short)
				}
				if len(x.FrameTimes) != 4 || x.ClipDraws == nil {
					t.Fatalf("%s: frame times %v, draws %v: want 4 times and the draws", x.Key, x.FrameTimes, x.ClipDraws)
				}
				for j := 1; j < 4; j++ {
					if x.FrameTimes[j] < x.FrameTimes[j-1] || (x.FrameTimes[j] == x.FrameTimes[j-1] && !x.Short) {
						t.Errorf("%s: frame times %v not rising", x.Key, x.FrameTimes)
					}
				}
				if x.Short {
					short++
				}
			})
		}
	}
	if answered != len(log) {
		t.Fatalf("lineage answered %d steps, the log has %d", answered, len(log))
	}
	if short == 0 {
		t.Error("no clip was short: short_h264.mp4 is shorter than the 0.8 s window")
	}
}

// packDataset packs an ImageFolder's JPEGs into tar shards of perShard
// samples with a JSON-lines manifest (what longshore-pack writes).
func packDataset(t *testing.T, root string, perShard int) string {
	t.Helper()
	var keys []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			keys = append(keys, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	out := t.TempDir()
	if err := os.MkdirAll(filepath.Join(out, "shards"), 0o755); err != nil {
		t.Fatal(err)
	}
	var classes []string
	for _, k := range keys {
		if c := path.Dir(k); !slices.Contains(classes, c) {
			classes = append(classes, c)
		}
	}
	ds := &dataset.Dataset{Classes: classes}
	for first := 0; first < len(keys); first += perShard {
		object := fmt.Sprintf("shards/shard-%06d.tar", first/perShard)
		id := ds.AddObject(object)
		names := keys[first:min(first+perShard, len(keys))]
		datas := make([][]byte, len(names))
		for j, k := range names {
			if datas[j], err = os.ReadFile(filepath.Join(root, k)); err != nil {
				t.Fatal(err)
			}
		}
		var buf bytes.Buffer
		members, err := dataset.WriteTarShard(&buf, names, datas)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range members {
			ds.Samples = append(ds.Samples, m.Sample(ds, id, int32(slices.Index(classes, path.Dir(m.Name)))))
		}
		if err := os.WriteFile(filepath.Join(out, filepath.FromSlash(object)), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var manifest bytes.Buffer
	if err := dataset.WriteManifestJSONL(&manifest, ds); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, dataset.ManifestJSONLName), manifest.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPackedMatchesDeliveryLog: a packed dataset (tar shards), whose
// order's block defaults to 16 on the node and in lineage alike, and whose
// samples lineage reads from their tars.
func TestPackedMatchesDeliveryLog(t *testing.T) {
	root := packDataset(t, makeDataset(t, 50), 8)
	job := []string{"--dataset", root, "--epochs", "2", "--batch-size", "4", "--ranks", "2", "--transform", "train", "--size", "24", "--seed", "11", "--mix-window", "2"}
	log := runNode(t, job...)
	answered := 0
	for e := 0; e < 2; e++ {
		for r := 0; r < 2; r++ {
			a := lineage(t, append(job, "--epoch", strconv.Itoa(e), "--rank", strconv.Itoa(r), "--steps", "0-6")...)
			if !a.Job.Packed || a.Job.Block != 16 {
				t.Fatalf("job %+v: want packed, block 16 (the node's default)", a.Job)
			}
			answered += logSteps(t, log, a.Steps, true, func(s Step, _, i int, x Sample, _ delivered) {
				if !strings.HasSuffix(x.Object, ".tar") {
					t.Errorf("epoch %d rank %d step %d slot %d: lineage %s in %s, not in a tar", s.Epoch, s.Rank, s.Step, i, x.Key, x.Object)
				}
			})
		}
	}
	if answered != len(log) {
		t.Fatalf("lineage answered %d steps, the log has %d", answered, len(log))
	}
}

// TestVFlipMatchesDeliveryLog: a transform with vflip(p=0.5) (after the
// crop): lineage gives each sample's vertical flip, and it is the one the
// node applied: the delivered pixels are the same sample's unflipped
// pixels (the transform without vflip) where lineage says vflip=false and
// its flipped ones (vflip(p=1), the same crop: the draws are separate)
// where it says true; both occur.
func TestVFlipMatchesDeliveryLog(t *testing.T) {
	root := makeDataset(t, 30)
	job := []string{"--dataset", root, "--epochs", "1", "--batch-size", "8", "--ranks", "1", "--size", "24", "--seed", "3"}
	const ops = "random_resized_crop|vflip(p=0.5)"
	log := runNode(t, append(job, "--transform", ops)...)
	a := lineage(t, append(job, "--transform", ops, "--steps", "0-3")...)
	plain := lineage(t, append(job, "--transform", "random_resized_crop", "--steps", "0-3")...)
	flipped := lineage(t, append(job, "--transform", "random_resized_crop|vflip(p=1)", "--steps", "0-3")...)
	counts := map[bool]int{}
	logSteps(t, log, a.Steps, false, func(s Step, si, i int, x Sample, w delivered) {
		if x.VFlip == nil {
			t.Fatalf("step %d slot %d: no vflip in %+v", s.Step, i, x)
		}
		other := plain.Steps[si].Samples[i]
		if *x.VFlip {
			other = flipped.Steps[si].Samples[i]
		}
		if other.Pixels != w.px || *other.Crop != *x.Crop {
			t.Errorf("step %d slot %d %s: lineage says vflip=%v, but the delivered px:%s are not that sample's (px:%s)", s.Step, i, x.Key, *x.VFlip, w.px, other.Pixels)
		}
		counts[*x.VFlip]++
	})
	if counts[true] == 0 || counts[false] == 0 {
		t.Errorf("vflip counts %v: want both", counts)
	}
	if text := lineageText(t, append(job, "--transform", ops, "--step", "0")...); !strings.Contains(text, "vflip=true") && !strings.Contains(text, "vflip=false") {
		t.Errorf("the text answer gives no vflip:\n%s", text)
	}
}

// TestFlipsAfterEveryGeometryMatchDeliveryLog: hflip(p=0.5) and
// vflip(p=0.5) after eval's resize|center_crop and after resize (as
// torchvision's RandomHorizontalFlip and RandomVerticalFlip follow
// Resize + CenterCrop or Resize((S, S))): lineage gives each sample's
// flips, and they are the ones the node applied: the delivered pixels
// are those of the same sample under the transform with the flips it
// drew written in as certain (p=1) and the others left out; all four
// combinations occur.
func TestFlipsAfterEveryGeometryMatchDeliveryLog(t *testing.T) {
	root := makeDataset(t, 40)
	job := []string{"--dataset", root, "--epochs", "1", "--batch-size", "8", "--ranks", "1", "--size", "24", "--seed", "5"}
	for _, base := range []string{"resize(short=32)|center_crop", "resize"} {
		ops := base + "|hflip|vflip(p=0.5)"
		log := runNode(t, append(job, "--transform", ops)...)
		a := lineage(t, append(job, "--transform", ops, "--steps", "0-4")...)
		fixed := map[[2]bool]*Answer{}
		for _, hv := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			tr := base
			if hv[0] {
				tr += "|hflip(p=1)"
			}
			if hv[1] {
				tr += "|vflip(p=1)"
			}
			fixed[hv] = lineage(t, append(job, "--transform", tr, "--steps", "0-4")...)
		}
		counts := map[[2]bool]int{}
		logSteps(t, log, a.Steps, false, func(s Step, si, i int, x Sample, w delivered) {
			if x.Flip == nil || x.VFlip == nil {
				t.Fatalf("%s step %d slot %d: no flips in %+v", ops, s.Step, i, x)
			}
			hv := [2]bool{*x.Flip, *x.VFlip}
			other := fixed[hv].Steps[si].Samples[i]
			if other.Pixels != w.px || *other.Crop != *x.Crop {
				t.Errorf("%s step %d slot %d %s: lineage says flip=%v vflip=%v, but the delivered px:%s are not that sample's (px:%s)", ops, s.Step, i, x.Key, hv[0], hv[1], w.px, other.Pixels)
			}
			counts[hv]++
		})
		if len(counts) != 4 {
			t.Errorf("%s: flip counts %v: want all four", ops, counts)
		}
		if text := lineageText(t, append(job, "--transform", ops, "--step", "0")...); !strings.Contains(text, "flip=true") || !strings.Contains(text, "vflip=") {
			t.Errorf("%s: the text answer gives no flips:\n%s", ops, text)
		}
	}
}

// TestPixelDrawsMatchDeliveryLog: a transform with pixel ops that draw
// (brightness over a range, grayscale(p=0.5)): lineage gives each
// sample's brightness factor and grayscale decision (decode.PixelDrawsFor),
// and they are what the node applied: the delivered pixels are those of
// the same sample decoded with the draws written in as fixed ops
// (brightness(factor=F), grayscale or not); both decisions occur; the
// text answer prints them too.
func TestPixelDrawsMatchDeliveryLog(t *testing.T) {
	root := makeDataset(t, 24)
	job := []string{"--dataset", root, "--epochs", "1", "--batch-size", "8", "--ranks", "1", "--size", "20", "--seed", "5"}
	const geo = "random_resized_crop|hflip"
	const ops = geo + "|brightness(factor=0.5:1.5)|grayscale(p=0.5)"
	logPath := filepath.Join(t.TempDir(), "p.log")
	cmd := exec.Command(node(t), append(job, "--transform", ops, "--standalone", "--sink", "log:"+logPath, "--log-pixels", "--progress", "never", "--decoders", "2")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("longshore-node: %v\n%s", err, out)
	}
	log := readLog(t, logPath)
	a := lineage(t, append(job, "--transform", ops, "--steps", "0-2")...)
	if len(a.Steps) != len(log) {
		t.Fatalf("lineage answered %d steps, the log has %d", len(a.Steps), len(log))
	}
	grays := map[bool]int{}
	factors := map[float64]bool{}
	for _, s := range a.Steps {
		want := log[stepID{s.Epoch, s.Rank, s.Step}]
		if len(s.Samples) != len(want) {
			t.Fatalf("step %d: lineage has %d samples, the log %d", s.Step, len(s.Samples), len(want))
		}
		for i, x := range s.Samples {
			if x.Key != want[i].key || x.Pixels != want[i].px || x.Error != "" {
				t.Errorf("step %d slot %d: lineage %s px:%s %s, the log %s px:%s", s.Step, i, x.Key, x.Pixels, x.Error, want[i].key, want[i].px)
			}
			d := x.PixelDraws
			if len(d) != 2 || d[0].Op != "brightness" || d[0].Factor == nil || d[1].Op != "grayscale" || d[1].Gray == nil {
				t.Fatalf("step %d slot %d: pixel draws %+v, want a brightness factor then a grayscale decision", s.Step, i, d)
			}
			f, gray := *d[0].Factor, *d[1].Gray
			if !(f >= 0.5 && f < 1.5) {
				t.Fatalf("step %d slot %d: brightness factor %v outside [0.5, 1.5)", s.Step, i, f)
			}
			fixed := geo + "|brightness(factor=" + strconv.FormatFloat(f, 'g', -1, 64) + ")"
			if gray {
				fixed += "|grayscale"
			}
			explicit := lineage(t, append(job, "--transform", fixed, "--step", strconv.FormatInt(s.Step, 10))...)
			if got := explicit.Steps[0].Samples[i]; got.Key != x.Key || got.Pixels != want[i].px {
				t.Errorf("step %d slot %d %s: lineage says brightness %v grayscale %v, but %s gives px:%s, the node delivered px:%s",
					s.Step, i, x.Key, f, gray, fixed, got.Pixels, want[i].px)
			}
			grays[gray]++
			factors[f] = true
		}
	}
	if grays[true] == 0 || grays[false] == 0 || len(factors) < 10 {
		t.Errorf("grayscale decisions %v, %d distinct factors: want both decisions and many factors", grays, len(factors))
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), append(job, "--transform", ops, "--step", "0"), &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	if !strings.Contains(out.String(), " brightness=") || !strings.Contains(out.String(), " grayscale=") {
		t.Errorf("the text answer gives no pixel draws:\n%s", out.String())
	}
}

// TestDTypeMatchesDeliveryLog: a float job (--dtype float16, bfloat16,
// float32) whose transform ends with normalize: the node's --log-pixels
// digests the float sample the trainer got, and lineage's digest must be
// that one, for every dtype.
func TestDTypeMatchesDeliveryLog(t *testing.T) {
	root := makeDataset(t, 20)
	const ops = "random_resized_crop|vflip(p=0.5)|normalize(mean=[0.485,0.456,0.406],std=[0.229,0.224,0.225])"
	for _, dt := range []string{"float16", "bfloat16", "float32"} {
		job := []string{"--dataset", root, "--epochs", "1", "--batch-size", "8", "--ranks", "1", "--size", "16", "--seed", "9",
			"--transform", ops, "--dtype", dt}
		log := runNode(t, job...)
		a := lineage(t, append(job, "--steps", "0-2")...)
		answered := logSteps(t, log, a.Steps, false, nil)
		if answered != len(log) || a.Job.DType != dt {
			t.Fatalf("--dtype %s: lineage answered %d steps (job dtype %q), the log has %d", dt, answered, a.Job.DType, len(log))
		}
	}
}

// TestMixtureMatchesDeliveryLog: a standalone --mixture job of two
// sources (an ImageFolder, and a packed dataset whose manifest gives each
// sample a caption field) under a schedule: lineage answers each step from
// the job's flags alone, with each sample's source, its mixture key
// ("<source>/<key>"), its fields and its pixels, as the delivery log
// has them; and --key finds each place the log shows a key.
func TestMixtureMatchesDeliveryLog(t *testing.T) {
	web := makeDataset(t, 23)
	books := packDataset(t, makeDataset(t, 9), 4)
	// A caption field on every book.
	mpath := filepath.Join(books, dataset.ManifestJSONLName)
	b, err := os.ReadFile(mpath)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if _, ok := m["key"]; ok {
			m["caption"] = "about " + m["key"].(string)
		}
		out, _ := json.Marshal(m)
		lines = append(lines, string(out))
	}
	if err := os.WriteFile(mpath, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	job := []string{"--mixture", "web=" + web + ",books=" + books, "--mixture-schedule", "web:0.6,books:0.4;web:0.2,books:0.8@40",
		"--epochs", "2", "--batch-size", "5", "--ranks", "2", "--transform", "train", "--size", "16", "--seed", "13", "--mix-window", "2"}
	log := runNode(t, job...)
	answered, captions := 0, 0
	sources := map[string]int{}
	for e := 0; e < 2; e++ {
		for r := 0; r < 2; r++ {
			a := lineage(t, append(job, "--epoch", strconv.Itoa(e), "--rank", strconv.Itoa(r), "--steps", fmt.Sprintf("0-%d", 3))...)
			if a.Job.Mixture == nil || len(a.Job.Mixture.Sources) != 2 || a.Job.Mixture.Round != 5 {
				t.Fatalf("job %+v: want the mixture's two sources, round 5", a.Job)
			}
			answered += logSteps(t, log, a.Steps, true, func(_ Step, _, _ int, x Sample, _ delivered) {
				if !strings.HasPrefix(x.Key, x.Source+"/") {
					t.Errorf("%s: source %q", x.Key, x.Source)
				}
				sources[x.Source]++
				if x.Source == "books" {
					if x.Fields["caption"] != "about "+strings.TrimPrefix(x.Key, "books/") || !strings.HasPrefix(x.Object, "books/") {
						t.Errorf("%s: fields %v, object %q", x.Key, x.Fields, x.Object)
					}
					captions++
				}
			})
		}
	}
	if answered != len(log) || sources["web"] == 0 || captions == 0 {
		t.Fatalf("lineage answered %d steps, the log has %d; sources %v", answered, len(log), sources)
	}
	// The text form names the sources and each sample's.
	text := lineageText(t, append(job, "--epoch", "1", "--rank", "1", "--step", "1")...)
	t.Logf("longshore-lineage --mixture ... --epoch 1 --rank 1 --step 1:\n%s", text)
	for _, d := range log[stepID{1, 1, 1}] {
		src, _, _ := strings.Cut(d.key, "/")
		if !strings.Contains(text, d.key) || !strings.Contains(text, "source "+src+" index") || !strings.Contains(text, "px:"+d.px) {
			t.Errorf("text answer lacks %s (source %s) px:%s:\n%s", d.key, src, d.px, text)
		}
	}
	if !strings.Contains(text, "mixture: ") || !strings.Contains(text, "books: "+books) {
		t.Errorf("text answer lacks the mixture's sources:\n%s", text)
	}
	// The reverse.
	logAppearances(t, log, logKeys(log), job...)
}

// TestMixtureFileRound: a mixture file's round: is the job's
// --mixture-round: lineage answers a job given the file as it answers the
// one given the flag (the same round, the same steps), and refuses a
// --mixture-round that disagrees with the file, naming both.
func TestMixtureFileRound(t *testing.T) {
	a, b := makeDataset(t, 12), makeDataset(t, 20)
	path := filepath.Join(t.TempDir(), "mix.yaml")
	if err := os.WriteFile(path, []byte("sources:\n  - {name: a, dataset: "+a+", weight: 1}\n  - {name: b, dataset: "+b+", weight: 3}\nround: 8\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"--epochs", "1", "--batch-size", "4", "--seed", "9", "--transforms=false", "--steps", "0-7"}
	steps := func(args ...string) (int, string) {
		t.Helper()
		ans := lineage(t, append(args, common...)...)
		out, err := json.Marshal(ans.Steps)
		if err != nil {
			t.Fatal(err)
		}
		return ans.Job.Mixture.Round, string(out)
	}
	flagRound, flagSteps := steps("--mixture", "a="+a+":1,b="+b+":3", "--mixture-round", "8")
	fileRound, fileSteps := steps("--mixture", path)
	bothRound, bothSteps := steps("--mixture", path, "--mixture-round", "8")
	if flagRound != 8 || fileRound != 8 || bothRound != 8 || fileSteps != flagSteps || bothSteps != flagSteps {
		t.Errorf("rounds %d %d %d; steps\n%s\n%s\n%s\nwant round 8 and the flag's steps", flagRound, fileRound, bothRound, flagSteps, fileSteps, bothSteps)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), append([]string{"--mixture", path, "--mixture-round", "4"}, common...), &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "--mixture-round 4 and --mixture "+path+":4: round: 8 disagree") {
		t.Errorf("--mixture-round 4 against round: 8: exit %d, %q", code, errb.String())
	}
}

// TestCenterCropSizeMatchesDeliveryLog: center_crop(size=S) names the
// output side when --size is not given (the node's rule): lineage must
// decode at that side too, not at --size's default.
func TestCenterCropSizeMatchesDeliveryLog(t *testing.T) {
	root := makeDataset(t, 10)
	job := []string{"--dataset", root, "--epochs", "1", "--batch-size", "4", "--ranks", "1", "--seed", "2",
		"--transform", "resize(short=40)|center_crop(size=24)"}
	log := runNode(t, job...)
	a := lineage(t, append(job, "--steps", "0-2")...)
	logSteps(t, log, a.Steps, false, nil)
	if a.Job.Size != 24 {
		t.Errorf("job size %d, want center_crop's 24", a.Job.Size)
	}
}
