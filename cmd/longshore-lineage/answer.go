package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"strings"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/decode"
	"github.com/longshore/longshore/decode/video"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/s3"
	"github.com/longshore/longshore/storage/stores"
)

// Answer is what the command prints: the job as it understood it, then
// the steps asked about or the places a key appeared.
type Answer struct {
	Job         Job          `json:"job"`
	Steps       []Step       `json:"steps,omitempty"`
	Key         string       `json:"key,omitempty"`
	Index       *int64       `json:"index,omitempty"`
	Appearances []Appearance `json:"appearances,omitempty"`
	// UnrecordedEpochs are the epochs a cluster job's --key could not
	// look in: the journal holds no trails of them (it was written
	// before it recorded them, or their archive is gone).
	UnrecordedEpochs []int `json:"unrecorded_epochs,omitempty"`
	// UntracedEpochs are the epochs of a cluster job's --key whose
	// committed positions are not all in the journal's trails.
	UntracedEpochs []UntracedEpoch `json:"untraced_epochs,omitempty"`
	// Note says what the answer leaves out, and why.
	Note string `json:"note,omitempty"`
}

// UntracedEpoch is an epoch of a cluster job whose trails do not hold
// exactly its committed positions (cluster.CoverTrails).
type UntracedEpoch struct {
	Epoch int `json:"epoch"`
	// Untraced of the epoch's Committed positions are in no trail.
	Untraced  int64 `json:"untraced"`
	Committed int64 `json:"committed"`
	// Stray positions are in trails but not committed (the journal
	// disagrees with itself).
	Stray int64 `json:"stray,omitempty"`
	// KeyPositions (--key) are the positions of the key's sample in the
	// epoch among the untraced ones: committed, in a step not known.
	KeyPositions []int64 `json:"key_positions,omitempty"`
}

// addNote adds n to the answer's note (once).
func (a *Answer) addNote(n string) {
	switch {
	case n == "" || strings.Contains(a.Note, n):
	case a.Note == "":
		a.Note = n
	default:
		a.Note += "; " + n
	}
}

// Job is the job's layout: a standalone job's from its flags, a cluster
// job's (Mode "cluster") from its journal's generation Generation.
type Job struct {
	Mode       string `json:"mode"` // standalone or cluster
	Checkpoint string `json:"checkpoint,omitempty"`
	Generation uint64 `json:"generation,omitempty"`
	Dataset    string `json:"dataset"`
	Samples    int64  `json:"samples"`
	Excluded   int    `json:"excluded"`
	Packed     bool   `json:"packed"`
	Seed       uint64 `json:"seed"`
	Block      int    `json:"block"`
	Window     int    `json:"window"`
	Ranks      int    `json:"ranks"`
	BatchSize  int    `json:"batch_size"`
	Epochs     int    `json:"epochs"`
	DropLast   bool   `json:"drop_last"`
	Transform  string `json:"transform"`
	DType      string `json:"dtype"` // the samples' element type (--dtype): what the pixel digest is of
	Size       int    `json:"size"`
	Media      string `json:"media"`
	StreamLen  int64  `json:"samples_per_rank"` // per epoch, padding included (standalone)
	Steps      int64  `json:"steps_per_epoch"`  // per rank (standalone)
	// Mixture: a --mixture job's sources and rounds; Samples is then the
	// sources' samples together, an epoch Positions positions.
	Mixture *JobMixture `json:"mixture,omitempty"`
}

// JobMixture is a --mixture job's mixture (cluster.Mixture).
type JobMixture struct {
	Spec      string      `json:"spec"`
	Schedule  string      `json:"schedule,omitempty"`
	Round     int         `json:"round"`
	Positions int64       `json:"positions"` // an epoch's: the samples rounded up to whole rounds
	Sources   []JobSource `json:"sources"`
}

// JobSource is one source of a mixture: its samples are the global
// indices [Offset, Offset+Samples).
type JobSource struct {
	Name     string `json:"name"`
	Dataset  string `json:"dataset"`
	Samples  int64  `json:"samples"`
	Excluded int    `json:"excluded"`
	Offset   int64  `json:"offset"`
	Packed   bool   `json:"packed"`
}

// Step is one step's samples, in batch order.
type Step struct {
	Epoch int `json:"epoch"`
	Rank  int `json:"rank"`
	// RankName and Session: a cluster rank's name and the session that
	// delivered the step (the coordinator's fence, <life>.<seq>).
	RankName string `json:"rank_name,omitempty"`
	Session  string `json:"session,omitempty"`
	Step     int64  `json:"step"`
	// Uncertain: a cluster step whose share of the positions between two
	// commits the journal does not fix (cluster.TrailStep): its samples
	// are one of the ways they were split, the ones around it hold the
	// rest.
	Uncertain bool     `json:"uncertain,omitempty"`
	Samples   []Sample `json:"samples"`
}

// Sample is one sample of a step.
type Sample struct {
	Slot     int    `json:"slot"`
	Offset   int64  `json:"stream_offset"`
	OrderPos int64  `json:"order_position"`
	Index    int64  `json:"index"`
	Key      string `json:"key"`
	Label    int32  `json:"label"`
	Class    string `json:"class,omitempty"`
	// Source, SourceIndex and SourceEpoch: a mixture's (--mixture)
	// source of the sample, its index in that source and the source epoch
	// its draw belongs to (cluster.Draw); Key is then "<source>/<key>".
	Source      string `json:"source,omitempty"`
	SourceIndex *int64 `json:"source_index,omitempty"`
	SourceEpoch *int64 `json:"source_epoch,omitempty"`
	// Fields are the sample's fields (docs/fields.md): numbers, strings,
	// lists of them, bytes (base64 in JSON).
	Fields map[string]any `json:"fields,omitempty"`
	// Object and ObjectOffset: where a packed sample's bytes lie (its tar
	// shard); empty for a sample that is its own object (Key).
	Object       string `json:"object,omitempty"`
	ObjectOffset int64  `json:"object_offset,omitempty"`
	Bytes        int64  `json:"bytes"`
	Pad          bool   `json:"pad,omitempty"`
	Seed         uint64 `json:"sample_seed"`
	// The transform, from the image's header (with --transforms).
	Width  int          `json:"width,omitempty"`
	Height int          `json:"height,omitempty"`
	Crop   *decode.Rect `json:"crop,omitempty"`
	Flip   *bool        `json:"flip,omitempty"`
	// VFlip: the vertical flip (a transform's vflip(p=P); false without
	// one), drawn from the sample's seed as the decoder draws it.
	VFlip *bool `json:"vflip,omitempty"`
	// PixelDraws: what each of the transform's pixel ops drew for the
	// sample, in the ops' order (decode.PixelDrawsFor, the decoder's own
	// draws): a brightness op's factor, a grayscale op's decision.
	PixelDraws []PixelDraw `json:"pixel_draws,omitempty"`
	// A clip's (--media video): the chosen frames' times in seconds, in
	// order; whether the window ran past the clip's end (its last frame
	// repeated); and the clip's random draws (video.Draws): the window's
	// start and the crop's x and y, each a fraction of the room for it
	// (0.5, 0.5, 0.5 centred, for eval).
	FrameTimes []float64   `json:"frame_times,omitempty"`
	Short      bool        `json:"short,omitempty"`
	ClipDraws  *[3]float64 `json:"clip_draws,omitempty"`
	// Pixels is the FNV-1a 64 digest of the decoded sample, as the
	// node's --log-pixels writes it (px:<16 hex digits>).
	Pixels string `json:"pixels,omitempty"`
	Error  string `json:"error,omitempty"`
}

// PixelDraw is one pixel op's draw for a sample (decode.PixelDraw):
// Factor for brightness, Gray for grayscale.
type PixelDraw struct {
	Op     string   `json:"op"`
	Factor *float64 `json:"factor,omitempty"`
	Gray   *bool    `json:"gray,omitempty"`
}

// pixelDraws is decode.PixelDrawsFor's answer as lineage gives it.
func pixelDraws(t decode.Transform, sampleSeed uint64) ([]PixelDraw, error) {
	ds, err := decode.PixelDrawsFor(t, sampleSeed)
	if err != nil {
		return nil, err
	}
	var out []PixelDraw
	for _, d := range ds {
		p := PixelDraw{Op: d.Op}
		switch d.Op {
		case "brightness":
			f := d.Factor
			p.Factor = &f
		case "grayscale":
			g := d.Gray
			p.Gray = &g
		}
		out = append(out, p)
	}
	return out, nil
}

// Appearance is one place a key appeared.
type Appearance struct {
	Epoch    int    `json:"epoch"`
	Rank     int    `json:"rank"`
	RankName string `json:"rank_name,omitempty"`
	Session  string `json:"session,omitempty"`
	Step     int64  `json:"step"`
	Slot     int    `json:"slot"`
	Offset   int64  `json:"stream_offset"`
	Pad      bool   `json:"pad,omitempty"`
	// Uncertain: the step is uncertain (see Step); the session and the
	// span of steps are not.
	Uncertain bool `json:"uncertain,omitempty"`
}

// usageError is a question the job has no answer to (a step past the
// epoch, a key not in the dataset): exit status 2, as a flag's mistake.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// openDataset opens the job's dataset as the standalone node lists it: the
// same discovery options, so the same indices.
func openDataset(ctx context.Context, o options) (storage.Store, *dataset.Dataset, error) {
	ex, err := readExclusions(o)
	if err != nil {
		return nil, nil, err
	}
	return openSource(ctx, o, o.dataset, ex)
}

// readExclusions reads --exclude (nil without it).
func readExclusions(o options) (dataset.Exclusions, error) {
	if o.exclude == "" {
		return nil, nil
	}
	f, err := os.Open(o.exclude)
	if err != nil {
		return nil, fmt.Errorf("--exclude: %w", err)
	}
	defer f.Close()
	ex, err := dataset.ReadExclusions(f)
	if err != nil {
		return nil, fmt.Errorf("--exclude %s: %w", o.exclude, err)
	}
	return ex, nil
}

// openSource opens the dataset at location (--dataset, or a --mixture
// source) with the exclusions ex, as the standalone node opens it.
func openSource(ctx context.Context, o options, location string, ex dataset.Exclusions) (storage.Store, *dataset.Dataset, error) {
	dopts := dataset.DefaultDiscoverOptions()
	if o.manifest != "" {
		dopts.Layout = dataset.LayoutManifest
		dopts.Manifest = o.manifest
	}
	var err error
	if dopts.Extensions, err = dataset.MediaExtensions(o.media); err != nil {
		return nil, nil, err
	}
	if ex != nil {
		dopts.Exclude = ex
	}
	sopts := s3.DefaultOptions()
	if o.s3Endpoint != "" {
		sopts.Endpoint = o.s3Endpoint
	}
	// A packed dataset's samples are read one ranged GET each: a query
	// reads a few.
	s, err := stores.Open(ctx, location, sopts)
	if err != nil {
		return nil, nil, fmt.Errorf("dataset %s: %w", location, err)
	}
	return dataset.Open(ctx, s, location, dopts, &dataset.PackedConfig{})
}

func answer(ctx context.Context, o options) (*Answer, error) {
	if o.mixture != "" {
		return answerMixture(ctx, o)
	}
	st, ds, err := openDataset(ctx, o)
	if err != nil {
		return nil, err
	}
	defer storage.Close(st)
	block := o.block
	if !o.blockSet {
		block = cluster.DefaultBlock(ds.Packed()) // as the standalone node's orderBlock
	}
	n := int64(len(ds.Samples))
	l := cluster.Lineage{Samples: n, World: o.ranks, Batch: int64(o.batchSize), DropLast: o.dropLast}
	a := &Answer{Job: Job{Mode: "standalone", Dataset: o.dataset, Samples: n, Excluded: ds.Excluded, Packed: ds.Packed(), Seed: o.seed,
		Block: block, Window: cluster.EffectiveWindow(block, o.window), Ranks: o.ranks, BatchSize: o.batchSize,
		Epochs: o.epochs, DropLast: o.dropLast, Transform: o.transform, DType: o.dtype, Size: o.size, Media: o.media,
		StreamLen: l.StreamLen(), Steps: l.Steps()}}
	order := func(epoch int) cluster.Order { return cluster.NewOrder(o.seed, epoch, n, block, o.window) }

	if o.key != "" {
		idx, err := findKey(ds, o.key)
		if err != nil {
			return nil, usageError{fmt.Errorf("dataset %s: %w", o.dataset, err)}
		}
		a.Key, a.Index = o.key, &idx
		first, last := 0, o.epochs-1
		if o.epochSet {
			first, last = o.epoch, o.epoch
		}
		for e := first; e <= last; e++ {
			hits, err := l.Find(order(e), idx)
			if err != nil {
				return nil, err
			}
			for _, h := range hits {
				a.Appearances = append(a.Appearances, Appearance{Epoch: e, Rank: h.Rank, Step: h.Step, Slot: h.Slot, Offset: h.Offset, Pad: h.Pad})
			}
		}
		return a, nil
	}

	if o.steps.Last >= l.Steps() {
		return nil, usageError{fmt.Errorf("steps %d-%d: each rank has steps 0..%d of an epoch (%d samples a rank, batch size %d%s)",
			o.steps.First, o.steps.Last, l.Steps()-1, l.StreamLen(), o.batchSize, map[bool]string{true: ", last short batch dropped"}[o.dropLast])}
	}
	tr, err := openTransformer(o, a)
	if err != nil {
		return nil, err
	}
	if tr != nil {
		defer tr.close()
	}
	ord := order(o.epoch)
	for s := o.steps.First; s <= o.steps.Last; s++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		got, err := l.Step(ord, o.rank, s)
		if err != nil {
			return nil, err
		}
		step := Step{Epoch: o.epoch, Rank: o.rank, Step: s}
		for _, g := range got {
			step.Samples = append(step.Samples, sampleOf(ctx, st, ds, tr, o.seed, o.epoch, g))
		}
		a.Steps = append(a.Steps, step)
	}
	return a, nil
}

// openTransformer returns the decoder that recomputes each sample's
// transform, or nil with the reason in a.Note.
func openTransformer(o options, a *Answer) (*transformer, error) {
	if !o.transforms {
		a.addNote("--transforms=false: no sample was read, so no crop box, flip or pixel digest")
		return nil, nil
	}
	tr, note, err := newTransformer(o)
	a.addNote(note)
	return tr, err
}

// sampleOf is what lineage says of one sample of a step of epoch: the
// dataset's record of it (key, label, fields, where its bytes lie), its
// seed and, with tr, its transform and pixel digest.
func sampleOf(ctx context.Context, st storage.Store, ds *dataset.Dataset, tr *transformer, seed uint64, epoch int, g cluster.LineageSample) Sample {
	smp := ds.Samples[g.Index]
	out := Sample{Slot: g.Slot, Offset: g.Offset, OrderPos: g.OrderPos, Index: g.Index, Key: smp.Key,
		Label: smp.Label, Bytes: smp.Size, Pad: g.Pad, Seed: decode.SampleSeed(seed, epoch, g.Index)}
	if int(smp.Label) >= 0 && int(smp.Label) < len(ds.Classes) {
		out.Class = ds.Classes[smp.Label]
	}
	if smp.Packed() {
		out.Object, out.ObjectOffset = ds.Object(smp.Object), smp.Offset
	}
	out.Fields = fieldsOf(ds, g.Index)
	if tr != nil {
		tr.fill(ctx, st, g.Index, smp.Key, &out)
	}
	return out
}

// fieldsOf is sample index's fields in ds (nil without any).
func fieldsOf(ds *dataset.Dataset, index int64) map[string]any {
	row := ds.Fields.Row(int(index))
	if row == nil {
		return nil
	}
	out := map[string]any{}
	for c, f := range ds.Fields.Schema() {
		if v, ok := fieldValue(row[c]); ok {
			out[f.Name] = v
		}
	}
	return out
}

// findKey returns the index of the sample with key: its exact key or, in
// a packed dataset, its member name in its tar (a packed sample's key is
// <tar>/<member>: "c1/x.jpg" finds "shards/000003.tar/c1/x.jpg" if no
// other tar has that member).
func findKey(ds *dataset.Dataset, key string) (int64, error) {
	var members []int64
	for i, s := range ds.Samples {
		if s.Key == key {
			return int64(i), nil
		}
		if s.Packed() && s.Key == ds.Object(s.Object)+"/"+key {
			members = append(members, int64(i))
		}
	}
	switch len(members) {
	case 0:
		return 0, fmt.Errorf("key %q is not in the dataset (%d samples after exclusions)", key, len(ds.Samples))
	case 1:
		return members[0], nil
	}
	return 0, fmt.Errorf("key %q is a member of %d tars (%s, %s, ...): give the sample's whole key", key, len(members),
		ds.Samples[members[0]].Key, ds.Samples[members[1]].Key)
}

// transformer reads a sample and decodes it as the node's pipeline does
// (decode.Decoder, the job's decode flags, the pipeline's per-sample
// seed decode.SampleSeed(seed, epoch, index)): the decoder places the
// crop with decode.SamplingFor on the image's size, and the decoded bytes
// are what the trainer got, so their digest is the delivery log's.
type transformer struct {
	dec  *decode.Decoder // images
	clip *video.Decoder  // --media video
	vc   video.Config
	buf  []byte
	dst  []byte
	t    decode.Transform
}

// newTransformer returns nil and a note saying why when the job's
// samples have no transform this command recomputes.
func newTransformer(o options) (*transformer, string, error) {
	switch {
	case o.media == "video":
		return newClipTransformer(o)
	case o.media == "audio":
		return nil, "--media audio: the window is chosen from the waveform's length while it is decoded (decode/audio); this command does not decode audio, so it gives no window (the keys and seeds are exact)", nil
	case o.decoder == "none":
		return nil, "--decoder none: the job decoded nothing, so there is no transform", nil
	}
	c := decode.DefaultConfig()
	t, err := decode.ParseTransform(o.transform)
	if err != nil {
		return nil, "", err
	}
	t.Size = o.size
	c.Transform = t
	if c.Layout, err = decode.ParseLayout(o.layout); err != nil {
		return nil, "", err
	}
	// The digest is of the slot's bytes: with a float dtype, the decoder's
	// x/255 (and the transform's normalize) in that dtype.
	if c.DType, err = decode.ParseDType(o.dtype); err != nil {
		return nil, "", err
	}
	c.MaxPixels, c.Lowres = o.maxPixels, o.lowres
	switch o.decoder {
	case "turbo":
		c.FastJPEG = true
	case "ffmpeg":
		c.FastJPEG = false
	default:
		return nil, "", fmt.Errorf("--decoder %q: want turbo, ffmpeg or none", o.decoder)
	}
	if err := c.Validate(); err != nil {
		return nil, "", err
	}
	d, err := decode.NewDecoder(c)
	if err != nil {
		return nil, "", err
	}
	return &transformer{dec: d, dst: make([]byte, c.SampleBytes()), t: t}, "", nil
}

// newClipTransformer decodes clips as the node's --media video does
// (video.Decoder, the job's clip flags): the frame times are the ones
// the decoder chose from the clip's timestamps.
func newClipTransformer(o options) (*transformer, string, error) {
	c := video.Config{Frames: o.clipFrames, FPS: o.clipFPS, Size: o.size, Threads: 1, NHWC: strings.EqualFold(o.layout, "nhwc")}
	switch strings.ToLower(o.transform) {
	case "train":
		c.Train = true
	case "eval":
	default:
		return nil, "", fmt.Errorf("--media video --transform %q: want train (random window and crop) or eval (centered)", o.transform)
	}
	var err error
	if c.Sampling, err = video.ParseSampling(o.clipSampling); err != nil {
		return nil, "", fmt.Errorf("--clip-sampling: %w", err)
	}
	if c.Frames <= 0 || c.FPS <= 0 || c.Size <= 0 {
		return nil, "", fmt.Errorf("--clip-frames %d, --clip-fps %v, --size %d: need positive values", c.Frames, c.FPS, c.Size)
	}
	if err := c.Validate(); err != nil {
		return nil, "", err
	}
	d, err := video.NewDecoder(c)
	if err != nil {
		return nil, "", err
	}
	return &transformer{clip: d, vc: c, dst: make([]byte, c.SampleBytes())}, "", nil
}

func (t *transformer) close() {
	if t.dec != nil {
		t.dec.Close()
	}
	if t.clip != nil {
		t.clip.Close()
	}
}

// fillClip decodes a clip and sets its frame times, draws and digest.
func (t *transformer) fillClip(out *Sample) {
	c, err := t.clip.Decode(t.buf, out.Seed, t.dst)
	if err != nil {
		out.Error = fmt.Sprintf("decode: %v", err)
		return
	}
	out.Width, out.Height, out.Short = c.Width, c.Height, c.Short
	for _, pts := range c.PTS {
		out.FrameTimes = append(out.FrameTimes, float64(pts)*float64(c.TimeBaseNum)/float64(c.TimeBaseDen))
	}
	start, x, y := video.Draws(out.Seed, t.vc.Train)
	out.ClipDraws = &[3]float64{start, x, y}
	out.Pixels = digest(t.dst)
}

// digest is --log-pixels' digest of a sample's bytes.
func digest(b []byte) string {
	h := fnv.New64a()
	h.Write(b)
	return fmt.Sprintf("%016x", h.Sum64())
}

// fill reads sample index and sets its size, crop, flips and pixel
// digest; a sample that cannot be read or decoded gets its error (the
// job failed it too).
func (t *transformer) fill(ctx context.Context, st storage.Store, index int64, key string, out *Sample) {
	var err error
	if ss, ok := st.(storage.SampleStore); ok {
		t.buf, err = ss.GetSample(ctx, index, key, t.buf)
	} else {
		t.buf, err = st.Get(ctx, key, t.buf)
	}
	if err != nil {
		out.Error = fmt.Sprintf("read: %v", err)
		return
	}
	if t.clip != nil {
		t.fillClip(out)
		return
	}
	info, err := t.dec.Decode(t.buf, out.Seed, t.dst)
	if err != nil {
		out.Error = fmt.Sprintf("decode: %v", err)
		return
	}
	// The decoder's crop is SamplingFor's on the header's size; say it
	// from SamplingFor here too, so the answer is the pure function's.
	s := decode.SamplingFor(t.t, info.Width, info.Height, out.Seed)
	if s.Crop != info.Crop || s.Flip != info.Flip || s.VFlip != info.VFlip {
		out.Error = fmt.Sprintf("the decoder placed crop %+v flip %v vflip %v, SamplingFor says %+v %v %v", info.Crop, info.Flip, info.VFlip, s.Crop, s.Flip, s.VFlip)
	}
	out.Width, out.Height = info.Width, info.Height
	crop, flip, vflip := s.Crop, s.Flip, s.VFlip
	out.Crop, out.Flip, out.VFlip = &crop, &flip, &vflip
	// The pixel ops' draws: the decoder applied these (the same
	// per-op draw), and the digest includes their effect.
	if out.PixelDraws, err = pixelDraws(t.t, out.Seed); err != nil {
		out.Error = fmt.Sprintf("pixel ops: %v", err)
	}
	out.Pixels = digest(t.dst)
}

// fieldValue is a field's value as JSON writes it; false when absent.
func fieldValue(v dataset.Value) (any, bool) {
	switch v.Type {
	case dataset.FieldInt:
		return v.Int, true
	case dataset.FieldFloat:
		return v.Float, true
	case dataset.FieldString:
		return v.Str, true
	case dataset.FieldBytes:
		return v.Bytes, true
	case dataset.FieldInts:
		return v.Ints, true
	case dataset.FieldFloats:
		return v.Floats, true
	case dataset.FieldStrings:
		return v.Strings, true
	}
	return nil, false
}
