// Command longshore-node is the per-host daemon: it fetches samples from an
// object store or directory, decodes and transforms them, assembles batches
// in slot buffers and hands them to the trainer.
//
// Standalone mode runs one machine's whole job without a coordinator:
//
//	longshore-node --standalone --dataset DIR|s3://bucket/prefix --epochs N \
//	    --batch-size 32 --transform train --seed S --sink null|log:PATH --stats-json PATH
//
// Cluster mode joins a job run by longshore-coordinator; epochs, seed and
// batch size come from the coordinator:
//
//	longshore-node --join COORD_GOSSIP_HOST:PORT --gossip HOST:PORT --listen HOST:PORT \
//	    --ranks R --dataset DIR|s3://bucket/prefix --sink log:PATH --commit-every K
//
// With --sink feed (either mode) each rank's batches go to a trainer
// process over a Unix socket in --feed-dir (docs/feed-protocol.md),
// admitting only trainers of the node's uid (SO_PEERCRED) unless
// --feed-allow-uid / --feed-allow-gid name others.
//
// In cluster mode off loopback, gossip needs --gossip-key-file and the
// control plane --tls-cert, --tls-key and --tls-ca, or the node refuses to
// start; --insecure overrides. See docs/security.md.
//
// A packed dataset (samples in tar shards, made by longshore-pack; see
// docs/packed-datasets.md) is read a chunk at a time: the samples of one
// block of the epoch order that share a shard, with one ranged GET, held
// in a cache of --pack-cache bytes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"syscall"
	"time"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/cmd/internal/config"
	"github.com/longshore/longshore/cmd/internal/listing"
	"github.com/longshore/longshore/cmd/internal/logs"
	"github.com/longshore/longshore/cmd/internal/secure"
	"github.com/longshore/longshore/cmd/internal/version"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/decode"
	"github.com/longshore/longshore/delivery"
	"github.com/longshore/longshore/gpu"
	"github.com/longshore/longshore/observe"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/s3"
	"github.com/longshore/longshore/storage/stores"
)

// options are the command line, gathered before anything starts so that
// every mistake is reported at once.
type options struct {
	standalone       bool
	dataset          string
	manifest         string
	mediaColumn      string
	labelColumn      string
	s3Endpoint       string
	s3Credentials    s3.CredentialsFlag
	epochs           int
	batchSize        int
	transform        string
	size             int
	sizeSet          bool // --size was given
	layout           string
	dtype            string
	seed             uint64
	ranks            int
	sink             string
	logPixels        bool
	feedDir          string
	feedHello        time.Duration // --feed-hello-timeout
	job              string
	forceResume      bool
	statsJSON        string
	maxFailures      string
	maxPixels        int64
	fetchConcurrency fetchFlag
	decoders         int
	slots            int
	dropLast         bool
	shortBatches     bool
	lowres           bool
	decoder          string
	progress         string
	cpuProfile       string
	pprofAddr        string
	memoryBudget     byteSize
	slotsSet         bool
	trace            string
	readAhead        int
	storeOutage      time.Duration
	packCache        packCache
	packSpill        packSpill
	// spillProbe measures a spill directory's disk for --pack-spill auto
	// (nil: dataset.ProbeSpillDisk; tests give their own).
	spillProbe    func(dir string, readSize int64) (dataset.DiskSpeed, error)
	manifestCache byteSize
	writeManifest int
	block         int  // standalone: the epoch order's block (see orderBlock)
	blockSet      bool // --block was given
	window        int  // standalone: the epoch order's window
	logs          logs.Flags
	printConfig   *bool
	flags         *flag.FlagSet // for --print-config
	metrics       string
	metricsToken  string
	metricsConns  int // --metrics-max-conns
	metricsLinger time.Duration
	reportEvery   time.Duration
	faults        faultFlags
	autotune      *autotune // --autotune, --cpu-budget (autotune.go)
	mixture       mixtureFlags
	mediaFlags

	// cluster mode
	id              string
	join            string
	gossip          string
	gossipAdvertise string
	gossipProfile   string
	gossipStreams   int   // --gossip-max-streams
	gossipBytes     int64 // --gossip-max-stream-bytes
	rejoinAfter     time.Duration
	giveUpAfter     time.Duration
	listen          string
	advertise       string
	commitEvery     int
	stepTime        time.Duration
	slowRanks       string
	slowFactor      float64
	sec             secure.Flags
	feedPeers       delivery.PeerPolicy // --feed-allow-uid, --feed-allow-gid
	gpuFlags        gpuFlags
	gpu             *gpuSetup // made by run, after the flags
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("longshore-node", flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := actors.DefaultConfig()
	fs.BoolVar(&o.standalone, "standalone", false, "run one machine's job without a coordinator")
	fs.StringVar(&o.dataset, "dataset", "", "dataset: a directory, file://DIR or s3://bucket/prefix (ImageFolder layout or a manifest)")
	fs.StringVar(&o.mixture.spec, "mixture", "", mixtureUsage)
	fs.StringVar(&o.mixture.schedule, "mixture-schedule", "", "with --mixture: weights that change during the run, phases separated by ';', each name:weight,...@SAMPLE (SAMPLE counted over the run's stream, epoch x the epoch's positions + offset; the first phase's @0 may be left out; '@SAMPLE linear' ramps to the phase's weights from the previous phase's start, each round exact), e.g. 'web:0.7,books:0.3;web:0.5,books:0.5@100000': a phase starts with the first round at or after its sample; the weights then come from here, not --mixture; not with a mixture file, which holds its schedule")
	fs.IntVar(&o.mixture.round, "mixture-round", 0, "with --mixture: samples per round, each holding every source in its exact largest-remainder count (0: --batch-size, in cluster mode the coordinator's, so every global batch is exact); a mixture file may give it (round: N): then leave it out or give the same")
	fs.StringVar(&o.manifest, "manifest", "", "manifest object (CSV key,label or JSON lines) relative to the dataset root; default: ImageFolder, or manifest.csv/manifest.jsonl if present")
	fs.StringVar(&o.mediaColumn, "media-column", "", "Parquet datasets: the column holding each sample's bytes (binary, or a struct with binary \"bytes\" as Hugging Face's Image feature); default: the one such column (docs/parquet.md)")
	fs.StringVar(&o.labelColumn, "label-column", "", "Parquet datasets: the integer column holding the labels; default: \"label\" if it is one, else every label is 0")
	fs.StringVar(&o.s3Endpoint, "s3-endpoint", "", "S3 endpoint URL (default $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, else AWS)")
	o.s3Credentials = s3.CredsAuto
	fs.Var(&o.s3Credentials, "s3-credentials", s3.CredentialsUsage)
	fs.IntVar(&o.epochs, "epochs", 1, "number of epochs")
	fs.IntVar(&o.batchSize, "batch-size", def.BatchSize, "samples per batch")
	fs.StringVar(&o.transform, "transform", "train", "train (RandomResizedCrop+flip), eval (resize 256 + center crop), resize, or an op list such as 'random_resized_crop(scale=0.08:1)|hflip(p=0.5)|brightness(factor=0.6:1.4)' (images; docs/media.md)")
	fs.IntVar(&o.size, "size", 224, "output side in pixels")
	fs.StringVar(&o.layout, "layout", "nchw", "sample layout: nchw or nhwc")
	fs.StringVar(&o.dtype, "dtype", "uint8", "images: the samples' element type: uint8 (the decoded pixels), or float16, bfloat16 or float32: ToTensor's x/255, then the transform's normalize(mean=[...],std=[...]) if it ends with one, converted in the decoder and written into the slot (2 or 4 bytes a value; docs/stages.md)")
	o.mediaFlags.register(fs)
	fs.Uint64Var(&o.seed, "seed", 0, "seed for the epoch order and the random transforms")
	fs.IntVar(&o.ranks, "ranks", 1, "trainer ranks served by this node")
	fs.StringVar(&o.sink, "sink", "null", "where batches go: null, log:PATH (no trainer; cluster mode: a stand-in trainer), or feed (serve real trainers over Unix sockets, zero copy; docs/feed-protocol.md)")
	fs.BoolVar(&o.logPixels, "log-pixels", false, "with --sink log:PATH: end each sample's line with px:<digest> of its decoded pixels (FNV-1a 64), to compare runs pixel for pixel")
	fs.StringVar(&o.feedDir, "feed-dir", "", "with --sink feed: directory of the per-rank sockets (default $LONGSHORE_FEED_DIR, $XDG_RUNTIME_DIR/longshore or /tmp/longshore-<uid>)")
	fs.DurationVar(&o.feedHello, "feed-hello-timeout", 10*time.Second, "with --sink feed: close a connection that has not said hello within this long; until it does it holds no rank")
	fs.StringVar(&o.job, "job", "standalone", "job name, carried in resume tokens")
	fs.BoolVar(&o.forceResume, "force-resume", false, "standalone --sink feed: accept a trainer's resume token although the dataset digest (same sample count) or --epochs differ from the run that made it (refused without it); another --seed, --block, --mix-window or --ranks is refused regardless (docs/resume.md)")
	fs.StringVar(&o.statsJSON, "stats-json", "", "write the run's figures as JSON to this path")
	fs.StringVar(&o.maxFailures, "max-failures", "1%", "failure budget: a count (100) or a fraction (0.01, 1%) of the samples attempted; cluster mode judges a fraction over at least 10/fraction samples, and a node past its budget exits (docs/faults.md)")
	fs.Int64Var(&o.maxPixels, "max-pixels", decode.DefaultMaxPixels, "refuse images whose header claims more pixels")
	o.fetchConcurrency = fetchFlag{n: fetchAutoMax, auto: true}
	fs.Var(&o.fetchConcurrency, "fetch-concurrency", fmt.Sprintf("object reads in flight per rank: auto (the rank keeps as many in flight as the store's latency needs at the pace it decodes, Little's law, from 16 up to %d), auto:N (up to N), or N (fixed)", fetchAutoMax))
	fs.IntVar(&o.decoders, "decoders", def.Decoders, "decoders for the whole node (default: one per core)")
	fs.IntVar(&o.slots, "slots", def.Slots, "batch slots per rank (bounds memory and read-ahead)")
	fs.Var(&o.memoryBudget, "memory-budget", "memory the loader may use, like 2GiB (docs/performance.md, Memory budget): the batch slots take at most half (fewer --slots, down to 2, unless --slots is given; an error if 2 do not fit), the ranks' fetched bytes a quarter, a packed dataset's in-memory chunk cache (--pack-cache auto) at most a quarter, and the Go heap's soft limit is the budget less the slots unless GOMEMLIMIT is set; 0 (default): no budget")
	fs.IntVar(&o.readAhead, "read-ahead", 0, "work items each rank takes ahead of its fetchers (0: automatic: standalone, slots x batch-size, raised to cover the store's slow fetches (the second slowest of each 250 ms) at the measured rate, up to 4096, so a packed dataset's chunks a round trip away are prefetched in time; in cluster mode max(batch-size, fetch-concurrency, or 16 with auto), since what a rank has taken cannot be handed to an idle rank)")
	fs.DurationVar(&o.storeOutage, "store-outage", def.StoreOutage, "how long a fetch keeps retrying a store that does not answer before the sample counts as failed (an outage is not bad data); negative: no retries beyond the S3 client's own")
	o.packCache = packCache{auto: true}
	fs.IntVar(&o.block, "block", cluster.DefaultConfig().Block, fmt.Sprintf("standalone: locality block of the epoch order, in samples: blocks of this many consecutive samples are shuffled, then the samples within each (1: a full shuffle); default 1, and %d for a packed dataset, as the coordinator's. With a packed dataset a block's samples that share a tar are one read (docs/packed-datasets.md). In cluster mode the coordinator's --block rules", cluster.PackedBlock))
	fs.IntVar(&o.window, "mix-window", cluster.DefaultWindow, "standalone: blocks of the epoch order mixed together when --block > 1: each batch draws from this many blocks at once, and a packed dataset's reader holds this many blocks' chunks at once (1: one block after another). In cluster mode the coordinator's --mix-window rules")
	listing.Register(fs, &o.writeManifest, "; standalone only: in cluster mode the coordinator writes it")
	o.manifestCache = byteSize(dataset.DefaultManifestCache)
	fs.Var(&o.manifestCache, "manifest-cache", "a manifest with an index beside it (longshore-manifest, docs/scale.md): memory for the pieces of the manifest read for the samples handed out (cluster mode: the node's leases), like 32MiB, instead of the whole sample list; 0: read the whole manifest at start. Packed datasets too: their chunks are planned from the pieces read")
	fs.Var(&o.packCache, "pack-cache", "packed datasets (tar shards, docs/packed-datasets.md): room for the chunks of samples read ahead (on disk with --pack-spill, else memory), like 1GiB: a rank holds a window of chunks (--block x --mix-window samples) at once; 0: read every sample alone; auto: 0 when the dataset is a directory on a local disk (a member is read in place, as cheaply as a file) and no --pack-spill DIR is given, else 1GiB (an object store, or a network file system: NFS, SMB, Lustre, FUSE)")
	o.packSpill = packSpill{auto: true}
	fs.Var(&o.packSpill, "pack-spill", "packed datasets: where the chunks read ahead are kept. DIR: files in this directory on a local disk (not tmpfs, which is memory), as Mosaic Streaming's and LitData's cache directories are; --pack-cache bounds the disk they take, and memory holds only the few chunks being fetched; files are unlinked once opened, so nothing is left behind. off: in memory. auto (default): $TMPDIR (or /tmp), else /var/tmp, when chunks come from an object store or a network file system, their windows would take over 32 MiB of memory (ImageNet-sized samples; small ones are served faster from memory) and the directory is on a disk with room for --pack-cache that keeps up with the node's cores (probed at start, 0.3 s at most: 64 MiB/s a core each way); else memory, and the start line says why")
	fs.BoolVar(&o.dropLast, "drop-last", false, "drop each epoch's final short batch")
	fs.BoolVar(&o.shortBatches, "short-batches", false, "leave a failed sample out of its batch, which shrinks; default: fill its place with a copy of another sample of the batch, marked in the batch's filled mask, so every batch keeps its shape (docs/feed-protocol.md)")
	fs.BoolVar(&o.lowres, "lowres", true, "let the JPEG decoder decode at 1/2, 1/4, 1/8 scale when the crop allows (faster on large photos); false: decode at full scale, the closest to torchvision's pixels (docs/fidelity.md)")
	fs.StringVar(&o.decoder, "decoder", "turbo", "JPEG decoder: turbo (libjpeg-turbo, decoding only what the crop needs; other formats and JPEGs it refuses go to FFmpeg) or ffmpeg (every image); none, for benchmarks only: nothing is decoded, each sample's pixels are its object's bytes repeated (what fetching and delivery cost alone)")
	fs.StringVar(&o.progress, "progress", "auto", "progress bar: auto (on a terminal), always, never")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a Go CPU profile of the run here (go tool pprof)")
	fs.StringVar(&o.pprofAddr, "pprof", "", "serve Go's profiles (heap, allocs, goroutines, CPU) at http://HOST:PORT/debug/pprof/ while the node runs (go tool pprof http://127.0.0.1:6060/debug/pprof/heap); loopback only; default off")
	fs.StringVar(&o.trace, "trace", "", "write a Go execution trace of the run here (go tool trace): where goroutines wait, on what")
	fs.StringVar(&o.metrics, "metrics", "", "serve Prometheus metrics at http://HOST:PORT/metrics (loopback, e.g. 127.0.0.1:9464; another address needs --metrics-token-file); default off")
	fs.IntVar(&o.metricsConns, "metrics-max-conns", observe.DefaultLimits().MaxConns, "with --metrics: the most connections the metrics server holds at once; more are closed unanswered (longshore_http_connections_refused_total)")
	fs.StringVar(&o.metricsToken, "metrics-token-file", "", "with --metrics: a file holding the bearer token every scrape must send (Prometheus: authorization.credentials_file); needed off loopback")
	fs.DurationVar(&o.metricsLinger, "metrics-linger", 0, "with --metrics: keep serving this long after the job ends, so a scraper collects the final values of a short job")
	fs.DurationVar(&o.reportEvery, "report-every", 30*time.Second, "log the live bottleneck report (images/s, each stage's busy fraction, the limiting stage and what to change) over each window this long; 0: never (with --metrics the window is then 10s)")
	fs.StringVar(&o.id, "id", "", "cluster mode: this node's id, unique in the cluster; ranks are <id>/<i> (default: host-port of --gossip)")
	fs.StringVar(&o.join, "join", "", "cluster mode: gossip address (host:port) of the coordinator or any member")
	fs.StringVar(&o.gossip, "gossip", "", "cluster mode: gossip bind address host:port")
	fs.StringVar(&o.gossipAdvertise, "gossip-advertise", "", "cluster mode: gossip address others use, if not --gossip (containers, NAT)")
	fs.IntVar(&o.gossipStreams, "gossip-max-streams", gossip.DefaultMaxInboundStreams, "cluster mode: the most inbound gossip streams held at once; more are closed at once (memberlist reads a stream's whole message, up to 20 MiB, before it can authenticate it)")
	fs.Int64Var(&o.gossipBytes, "gossip-max-stream-bytes", gossip.DefaultMaxStreamBytes, "cluster mode: the most bytes read from one inbound gossip stream before it is cut off; it must hold the largest membership sync, a few hundred bytes a member")
	fs.StringVar(&o.gossipProfile, "gossip-profile", "lan", "cluster mode: failure-detection timing: lan (~7 s to notice a dead node), local (loopback and small private networks, 4-6 s) or large (hundreds to thousands of nodes)")
	fs.DurationVar(&o.rejoinAfter, "rejoin-after", 5*time.Second, "cluster mode: re-join --join when no coordinator has been alive in gossip this long (a restarted coordinator may not know this node); 0: never")
	fs.DurationVar(&o.giveUpAfter, "give-up-after", 10*time.Minute, "cluster mode: exit with an error when no coordinator has been alive in gossip this long (the job ended while this node was cut off, or the coordinator is down); 0: wait forever")
	fs.StringVar(&o.listen, "listen", "", "cluster mode: control-message (protoactor remote) bind address host:port")
	fs.StringVar(&o.advertise, "advertise", "", "cluster mode: control-message address others use, if not --listen")
	fs.IntVar(&o.commitEvery, "commit-every", 1, "cluster mode, log sink: act as a trainer that commits every K steps and at the end of each epoch stream")
	fs.DurationVar(&o.stepTime, "step-time", 0, "cluster mode, debug: simulated training time per batch")
	fs.StringVar(&o.slowRanks, "slow-ranks", "", "cluster mode, debug: comma-separated rank indices that train --slow-factor times slower")
	fs.Float64Var(&o.slowFactor, "slow-factor", 5, "cluster mode, debug: the slowdown of --slow-ranks")
	o.sec.Register(fs)
	registerFeedPeers(fs, &o.feedPeers)
	o.faults.register(fs)
	o.autotune = registerAutotune(fs)
	registerGPUFlags(fs, &o.gpuFlags)
	o.logs.Register(fs)
	o.printConfig = config.Register(fs)
	o.flags = fs
	// The file's problems are reported with the rest (all at once).
	loadErr := config.Load(fs, args, os.LookupEnv)
	if err := fs.Parse(args); err != nil {
		return o, errors.Join(loadErr, err)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	errs := append([]error{loadErr}, o.faults.validate()...)
	errs = append(errs, o.autotune.check(o)...)
	if !o.standalone {
		if o.join == "" {
			errs = append(errs, errors.New("cluster mode needs --join (the coordinator's gossip address); or pass --standalone"))
		}
		if o.gossip == "" {
			errs = append(errs, errors.New("cluster mode needs --gossip HOST:PORT"))
		}
		if o.listen == "" {
			errs = append(errs, errors.New("cluster mode needs --listen HOST:PORT"))
		}
		if o.commitEvery < 1 {
			errs = append(errs, fmt.Errorf("--commit-every %d: need at least 1", o.commitEvery))
		}
		if o.gossipStreams < 1 || o.gossipBytes < 1 {
			errs = append(errs, fmt.Errorf("--gossip-max-streams %d, --gossip-max-stream-bytes %d: need at least 1", o.gossipStreams, o.gossipBytes))
		}
		if o.gossipProfile != "lan" && o.gossipProfile != "local" && o.gossipProfile != "large" {
			errs = append(errs, fmt.Errorf("--gossip-profile %q: want lan, local or large", o.gossipProfile))
		}
		if err := o.sec.Check(o.endpoints()); err != nil {
			errs = append(errs, err)
		}
		if o.dropLast {
			errs = append(errs, errors.New("--drop-last is the coordinator's in cluster mode (it drops the remainder so every rank's steps match)"))
		}
		if o.forceResume {
			errs = append(errs, errors.New("--force-resume is the standalone node's (in cluster mode, give it to the coordinator)"))
		}
		fs.Visit(func(f *flag.Flag) { // the command line or LONGSHORE_BLOCK, LONGSHORE_MIX_WINDOW
			if f.Name == "block" || f.Name == "mix-window" {
				errs = append(errs, fmt.Errorf("--%s is the coordinator's in cluster mode (every node must use the job's epoch order)", f.Name))
			}
		})
	}
	fs.Visit(func(f *flag.Flag) {
		o.blockSet = o.blockSet || f.Name == "block"
		o.slotsSet = o.slotsSet || f.Name == "slots"
		o.sizeSet = o.sizeSet || f.Name == "size"
		o.gpuFlags.ranksSet = o.gpuFlags.ranksSet || f.Name == "ranks"
		o.mixture.roundSet = o.mixture.roundSet || f.Name == "mixture-round"
	})
	if err := o.gpuFlags.check(); err != nil {
		errs = append(errs, err)
	}
	switch k, _ := o.mediaFlags.kind(); {
	case k == actors.KindVideo:
		o.gpuFlags.video = true
	case k == actors.KindAudio && o.gpuFlags.decodeOn == "cuda":
		errs = append(errs, errors.New("--decode-device cuda decodes images and video (a GPU has no audio decoder): leave it out with --media audio"))
	case k == actors.KindRaw && o.gpuFlags.decodeOn == "cuda":
		errs = append(errs, errors.New("--media raw decodes nothing: leave out --decode-device cuda"))
	}
	if o.block < 1 {
		errs = append(errs, fmt.Errorf("--block %d: need at least 1", o.block))
	}
	if o.feedHello <= 0 {
		errs = append(errs, fmt.Errorf("--feed-hello-timeout %v: need more than 0", o.feedHello))
	}
	if o.logPixels && !strings.HasPrefix(o.sink, "log:") {
		errs = append(errs, fmt.Errorf("--log-pixels records into the log sink: it needs --sink log:PATH, not %q", o.sink))
	}
	if o.window < 1 {
		errs = append(errs, fmt.Errorf("--mix-window %d: need at least 1", o.window))
	}
	if o.packSpill.dir != "" {
		if err := dataset.CheckSpillDir(o.packSpill.dir); err != nil {
			errs = append(errs, fmt.Errorf("--pack-spill: %w", err))
		}
	}
	switch err := o.mixture.parse(); {
	case err != nil:
		errs = append(errs, err)
	case o.mixture.on() && o.dataset != "":
		errs = append(errs, errors.New("--mixture is in place of --dataset: give one of them"))
	case o.dataset == "" && !o.mixture.on():
		errs = append(errs, errors.New("--dataset is required"))
	}
	if o.epochs < 1 {
		errs = append(errs, fmt.Errorf("--epochs %d: need at least 1", o.epochs))
	}
	if o.ranks < 1 {
		errs = append(errs, fmt.Errorf("--ranks %d: need at least 1", o.ranks))
	}
	errs = append(errs, checkMetricsFlags(o)...)
	errs = append(errs, o.mediaFlags.check(o.transform, o.size, o.layout)...)
	if dt, err := decode.ParseDType(o.dtype); err != nil {
		errs = append(errs, err)
	} else if k, _ := o.mediaFlags.kind(); dt != decode.Uint8 && k != actors.KindImage {
		errs = append(errs, fmt.Errorf("--dtype %s: images only (--media %s samples are %v)", o.dtype, k, actors.Shape{Kind: k}.DType()))
	}
	errs = append(errs, o.logs.Check()...)
	switch o.progress {
	case "auto", "always", "never":
	default:
		errs = append(errs, fmt.Errorf("--progress %q: want auto, always or never", o.progress))
	}
	return o, errors.Join(errs...)
}

func (o options) decodeConfig() (decode.Config, error) {
	c := decode.DefaultConfig()
	t, err := decode.ParseTransform(o.transform)
	if err != nil {
		return c, err
	}
	// center_crop(size=N) names the output side: it is --size's unless
	// --size says otherwise (then Validate refuses the two).
	switch {
	case t.CropSize != 0 && o.sizeSet && t.CropSize != o.size:
		return c, fmt.Errorf("--transform %q crops %d (center_crop(size=%d)) but --size %d: the output side is one number; drop one or make them agree", o.transform, t.CropSize, t.CropSize, o.size)
	case t.CropSize == 0 || o.sizeSet:
		t.Size = o.size
	}
	c.Transform = t
	if c.Layout, err = decode.ParseLayout(o.layout); err != nil {
		return c, err
	}
	if c.DType, err = decode.ParseDType(o.dtype); err != nil {
		return c, err
	}
	c.MaxPixels = o.maxPixels
	c.Lowres = o.lowres
	switch o.decoder {
	case "turbo":
		c.FastJPEG = true
	case "ffmpeg":
		c.FastJPEG = false
	case "none":
		if k, _ := o.mediaFlags.kind(); k != actors.KindImage {
			return c, fmt.Errorf("--decoder none: images only, not --media %s", o.mediaFlags.media)
		}
	default:
		return c, fmt.Errorf("--decoder %q: want turbo, ffmpeg or none", o.decoder)
	}
	return c, c.Validate()
}

func (o options) actorsConfig(dc decode.Config) (actors.Config, error) {
	c := actors.DefaultConfig()
	c.BatchSize = o.batchSize
	c.Slots = o.slots
	c.FetchConcurrency, c.FetchAuto = o.fetchConcurrency.n, o.fetchConcurrency.auto
	c.Decoders = o.decoders
	c.ReadAhead = o.readAhead
	c.ReadAheadAuto = o.readAhead == 0 // standalone; a cluster node turns it off
	c.StoreOutage = o.storeOutage
	c.DropLast = o.dropLast
	c.ShortBatches = o.shortBatches
	c.Seed = o.seed
	c.Epochs = o.epochs
	c.Sample = dc.Spec()
	b, err := actors.ParseFailureBudget(o.maxFailures)
	if err != nil {
		return c, fmt.Errorf("--max-failures: %w", err)
	}
	c.MaxFailures = b
	o.faults.actorsConfig(&c)
	if _, err := o.applyMemoryBudget(&c); err != nil {
		return c, err
	}
	return c, c.Validate()
}

func main() {
	version.Exit("longshore-node")
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	stderr = logs.SyncWriter(stderr) // loggers, progress and messages share it
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "longshore-node: %v\n", err)
		return 2
	}
	if *o.printConfig {
		if err := config.Print(stdout, o.flags); err != nil {
			fmt.Fprintf(stderr, "longshore-node: --print-config: %v\n", err)
			return 1
		}
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for _, pr := range []struct {
		flag, path string
		start      func(io.Writer) error
		stop       func()
	}{
		{"--cpuprofile", o.cpuProfile, pprof.StartCPUProfile, pprof.StopCPUProfile},
		{"--trace", o.trace, trace.Start, trace.Stop},
	} {
		if pr.path == "" {
			continue
		}
		f, err := os.Create(pr.path)
		if err == nil {
			if err = pr.start(f); err != nil {
				f.Close()
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "longshore-node: %s: %v\n", pr.flag, err)
			return 2
		}
		defer f.Close()
		defer pr.stop()
	}
	if o.pprofAddr != "" {
		stopPprof, err := startPprof(o.pprofAddr, newLogger(o, stderr))
		if err != nil {
			fmt.Fprintf(stderr, "longshore-node: %v\n", err)
			return 2
		}
		defer stopPprof()
	}
	if o.gpu, o.ranks, err = setupGPUs(gpu.DefaultDriver(), o.gpuFlags, o.ranks, stderr); err != nil {
		fmt.Fprintf(stderr, "longshore-node: %v\n", err)
		return 2
	}
	if line, err := o.memoryBudgetLine(); err != nil {
		fmt.Fprintf(stderr, "longshore-node: %v\n", err)
		return 2
	} else if line != "" {
		fmt.Fprintf(stderr, "longshore-node: %s\n", line)
	}
	defer o.gpu.Close()
	if err := runModes(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "longshore-node: %v\n", err)
		return 1
	}
	return 0
}

// openData opens the dataset's store and its dataset (dataset.NodeOpen):
// through the manifest's index where the lazy path applies (indexed set,
// ds nil; docs/scale.md), else the whole sample list (ds set). A packed
// dataset's store is a PackedStore reading chunks of the order's blocks
// (block and window; 0: the job's, in cluster mode), sized by plan.
func openData(ctx context.Context, o options, block, window int, logger *slog.Logger) (s storage.Store, ds *dataset.Dataset, indexed *dataset.IndexedManifest, plan dataset.PackPlan, err error) {
	c, err := o.nodeOpen(block, window)
	if err != nil {
		return nil, nil, nil, plan, err
	}
	if s, err = openStore(ctx, o, logger); err != nil {
		return nil, nil, nil, plan, err
	}
	if s, indexed, plan, err = dataset.OpenLazy(ctx, s, c); err != nil || indexed != nil {
		return s, nil, indexed, plan, err
	}
	s, ds, plan, err = dataset.OpenNode(ctx, s, c)
	return s, ds, nil, plan, err
}

// openStore opens the dataset's store, counted: the metrics show the
// requests the object store answers.
func openStore(ctx context.Context, o options, logger *slog.Logger) (storage.Store, error) {
	sopts := s3.DefaultOptions()
	if o.s3Endpoint != "" {
		sopts.Endpoint = o.s3Endpoint
	}
	sopts.Credentials = string(o.s3Credentials)
	if o.fetchConcurrency.n*o.ranks > sopts.FetchConcurrency {
		sopts.FetchConcurrency = o.fetchConcurrency.n * o.ranks
	}
	o.faults.s3Options(&sopts)
	s, err := stores.Open(ctx, o.dataset, sopts)
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", o.dataset, err)
	}
	if s3s, ok := s.(*s3.Store); ok && logger != nil {
		logger.Info("s3 credentials", "store", s3s.String(), "source", s3s.CredentialSource())
	}
	return storage.NewCountingStore(s), nil
}

// checkMetricsFlags reports what is wrong with --metrics and its kin.
func checkMetricsFlags(o options) []error {
	errs := observe.CheckMetricsFlags(o.metrics, o.metricsToken, o.metricsLinger, o.reportEvery)
	if err := observe.CheckMaxConns("--metrics-max-conns", o.metricsConns); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// wait is how long a stopped run gives its pipelines to drain.
const shutdownGrace = 10 * time.Second
