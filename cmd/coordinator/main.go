// Command longshore-coordinator runs a job's coordinator: it reads the
// dataset's manifest, hands out leases of each epoch's order to the ranks
// of the nodes that join by gossip, tracks their commits, re-issues what a
// lost node had not committed, and exits 0 once every epoch is committed
// everywhere and the nodes have left.
//
//	longshore-coordinator --dataset DIR|s3://bucket/prefix --listen HOST:PORT --gossip HOST:PORT \
//	    --epochs N --seed S --batch-size B [--shard-size K] [--drop-last] [--balance equal|dynamic] \
//	    [--commit-log PATH] [--checkpoint DIR|s3://bucket/jobs/<job> [--resume TOKEN | --fresh] [--force-resume] [--journal-fallback]]
//
// Nodes join with `longshore-node --join <this --gossip address> ...`.
//
// Off loopback, gossip needs --gossip-key-file (SIGHUP reloads it to
// rotate keys) and the control plane --tls-cert, --tls-key and --tls-ca
// (mutual TLS), or the coordinator refuses to start; --insecure
// overrides. See docs/security.md.
//
// For a packed dataset (samples in tar shards, docs/packed-datasets.md)
// --block defaults to 256 instead of 1: the nodes read the samples of one
// order block that share a shard with one request, which a full shuffle
// would reduce to a request per sample.
//
// With --checkpoint the coordinator keeps its state in a journal there
// (package cluster/journal), written before every commit is acknowledged;
// each ack carries a resume token. Started again with the same flags it
// continues from the journal's newest generation (and rejoins the gossip
// members it recorded there); --resume TOKEN continues from the commit
// the token names instead (an older one rewinds the data cursor to it);
// --fresh starts the job over although a journal exists. A journal that
// cannot be read — corrupt, missing bucket, refused credentials — is an
// error, never a silent fresh start; a corrupt newest generation too,
// unless --journal-fallback says to continue from the previous one. The
// journal records the job's identity (dataset digest, seed, block,
// window, batch size, epochs): a restart with another is refused, naming
// what differs, unless --force-resume accepts a dataset, batch size or
// epoch count that differ (docs/resume.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/coord"
	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/cluster/journal"
	"github.com/longshore/longshore/cluster/wire"
	"github.com/longshore/longshore/cmd/internal/config"
	"github.com/longshore/longshore/cmd/internal/listing"
	"github.com/longshore/longshore/cmd/internal/logs"
	"github.com/longshore/longshore/cmd/internal/secure"
	"github.com/longshore/longshore/cmd/internal/version"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/observe"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/s3"
	"github.com/longshore/longshore/storage/stores"
)

type options struct {
	dataset, manifest, s3Endpoint string
	mixture                       mixtureFlags
	mediaColumn, labelColumn      string
	s3Credentials                 s3.CredentialsFlag
	writeManifestOver             int
	exclude                       string
	listen, advertise             string
	gossip, gossipAdvertise       string
	gossipProfile                 string
	gossipStreams                 int   // --gossip-max-streams
	gossipBytes                   int64 // --gossip-max-stream-bytes
	commitLog                     string
	checkpoint, resume            string
	fresh, forceResume            bool
	journalFallback               bool
	journalKeep, checkEvery       int
	join                          string
	balance                       string
	batchSize                     int
	linger                        time.Duration
	tick                          time.Duration
	logs                          logs.Flags
	printConfig                   *bool
	flags                         *flag.FlagSet // for --print-config
	metrics, metricsToken         string
	http, httpToken               string
	metricsConns, httpConns       int // --metrics-max-conns, --http-max-conns
	metricsLinger, reportEvery    time.Duration
	jobStoreRPS                   float64
	media                         string
	cluster                       cluster.Config
	// given: which of --block, --mix-window and --shard-size were given
	// (on the command line or in the environment), by flag name.
	given map[string]bool
	sec   secure.Flags
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	o.cluster = cluster.DefaultConfig()
	c := &o.cluster
	fs := flag.NewFlagSet("longshore-coordinator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.dataset, "dataset", "", "dataset: a directory, file://DIR or s3://bucket/prefix (the nodes must see the same manifest)")
	o.mixture.register(fs)
	fs.StringVar(&o.manifest, "manifest", "", "manifest object relative to the dataset root; default: ImageFolder, or manifest.csv/manifest.jsonl if present")
	fs.StringVar(&o.mediaColumn, "media-column", "", "Parquet datasets: the column holding each sample's bytes (binary, or a struct with binary \"bytes\" as Hugging Face's Image feature); default: the one such column; give the nodes the same (docs/parquet.md)")
	fs.StringVar(&o.labelColumn, "label-column", "", "Parquet datasets: the integer column holding the labels; default: \"label\" if it is one, else every label is 0; give the nodes the same")
	fs.StringVar(&o.s3Endpoint, "s3-endpoint", "", "S3 endpoint URL (default $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, else AWS)")
	o.s3Credentials = s3.CredsAuto
	fs.Var(&o.s3Credentials, "s3-credentials", s3.CredentialsUsage)
	listing.Register(fs, &o.writeManifestOver, "; nodes starting after it read them too")
	fs.StringVar(&o.exclude, "exclude", "", "leave out the samples this file lists (a node's --quarantine file, or one key a line); every node must be given the same file, or its dataset digest will not match; with --mixture the keys are <source>/<key>, each source leaving out its own")
	fs.StringVar(&o.listen, "listen", "", "control-message (protoactor remote) bind address host:port")
	fs.StringVar(&o.advertise, "advertise", "", "control-message address nodes use, if not --listen (containers, NAT)")
	fs.StringVar(&o.gossip, "gossip", "", "gossip bind address host:port; nodes --join it")
	fs.StringVar(&o.gossipAdvertise, "gossip-advertise", "", "gossip address others use, if not --gossip")
	fs.IntVar(&o.gossipStreams, "gossip-max-streams", gossip.DefaultMaxInboundStreams, "the most inbound gossip streams held at once; more are closed at once (memberlist reads a stream's whole message, up to 20 MiB, before it can authenticate it)")
	fs.Int64Var(&o.gossipBytes, "gossip-max-stream-bytes", gossip.DefaultMaxStreamBytes, "the most bytes read from one inbound gossip stream before it is cut off; it must hold the largest membership sync, a few hundred bytes a member")
	fs.StringVar(&o.gossipProfile, "gossip-profile", "lan", "failure-detection timing: lan (~7 s to notice a dead node), local (loopback and small private networks, 4-6 s) or large (hundreds to thousands of nodes)")
	fs.StringVar(&o.commitLog, "commit-log", "", "append every acknowledged commit to this file (ack\\t<epoch>\\t<rank>\\t<session>\\t<step>\\t<offset>[\\t<token>]), written before the ack is sent; each coordinator life first appends life\\t<incarnation>\\t<generation restored, 0: fresh>")
	fs.StringVar(&o.checkpoint, "checkpoint", "", "journal location: a directory or s3://bucket/jobs/<job>; the coordinator continues from it when restarted")
	fs.StringVar(&o.resume, "resume", "", "resume token (from a trainer's checkpoint): continue from that commit instead of the journal's newest")
	fs.BoolVar(&o.fresh, "fresh", false, "start the job from scratch even though --checkpoint holds a journal")
	fs.BoolVar(&o.forceResume, "force-resume", false, "continue the journal's job although the dataset digest (same sample count), --batch-size or --epochs differ from the journal's (refused without it); a different --seed, --block or --mix-window is refused regardless (docs/resume.md)")
	fs.BoolVar(&o.journalFallback, "journal-fallback", false, "if the journal's newest generation is corrupt, continue from the previous readable one (commits acknowledged after it are issued again) instead of refusing to start")
	fs.IntVar(&o.journalKeep, "journal-keep", journal.DefaultConfig().Keep, "journal generations kept, so older resume tokens still restore")
	fs.IntVar(&o.checkEvery, "journal-check-every", 10, "ticks between checks that no other coordinator took over the journal")
	fs.StringVar(&o.join, "join", "", "gossip addresses (comma-separated) of cluster members to rejoin at start; the journal's recorded members are tried too")
	fs.IntVar(&c.Epochs, "epochs", 1, "number of epochs")
	fs.Uint64Var(&c.Seed, "seed", 0, "seed of every epoch's order (with the epoch number)")
	fs.IntVar(&o.batchSize, "batch-size", 32, "samples per batch (every node uses it)")
	fs.IntVar(&c.ShardSize, "shard-size", c.ShardSize, "most positions one lease covers")
	fs.IntVar(&c.Block, "block", c.Block, fmt.Sprintf("locality block of the epoch order, in samples (default %d for a packed dataset: docs/packed-datasets.md)", cluster.PackedBlock))
	fs.IntVar(&c.Window, "mix-window", c.Window, "blocks of the epoch order mixed together when --block > 1: each batch draws from this many blocks at once, and a node reading a packed dataset holds this many blocks' chunks per rank at once (1: one block after another); for a packed dataset --shard-size defaults to a window's positions (--block x --mix-window)")
	fs.BoolVar(&c.DropRemainder, "drop-last", false, "drop the tail of each epoch that does not divide among the ranks, instead of padding with repeats (equal balance only)")
	fs.StringVar(&o.balance, "balance", "equal", "equal: every rank gets the same number of steps per epoch (data-parallel training); dynamic: ranks take what they can, a straggler's leases are split")
	fs.IntVar(&c.StealMin, "steal-min", c.StealMin, "dynamic: fewest undelivered positions worth splitting off a straggler")
	fs.IntVar(&c.RevokeTimeout, "revoke-timeout", c.RevokeTimeout, "ticks a rank may leave a revoke unanswered before its node is evicted (0: never)")
	fs.IntVar(&c.MinRanks, "min-ranks", 1, "start the first epoch once this many ranks have joined (so every rank gets an equal share from the start)")
	fs.DurationVar(&o.tick, "tick", time.Second, "length of one coordinator tick")
	fs.DurationVar(&o.linger, "linger", 30*time.Second, "after the job is done, how long to wait for the nodes to finish and leave")
	fs.StringVar(&o.media, "media", "image", "what the dataset's samples are, for listing an ImageFolder: image (.jpg .jpeg .png .webp), video (.mp4 .m4v .mov .mkv .webm), audio (.wav .flac .mp3 .opus .ogg .oga) or raw (every file; raw:EXT[,EXT]: those extensions); give the nodes' --media (a manifest names its objects whatever they are)")
	fs.Float64Var(&o.jobStoreRPS, "job-store-rps", 0, "the job-wide object-store budget in requests per second, retries included, divided among the live nodes by their ranks as they join and leave (each node's own --store-rps still caps its share; 0: none)")
	o.sec.Register(fs)
	fs.StringVar(&o.metrics, "metrics", "", "serve Prometheus metrics at http://HOST:PORT/metrics (loopback, e.g. 127.0.0.1:9465; another address needs --metrics-token-file); default off")
	fs.StringVar(&o.metricsToken, "metrics-token-file", "", "with --metrics: a file holding the bearer token every scrape must send; needed off loopback")
	fs.DurationVar(&o.metricsLinger, "metrics-linger", 0, "with --metrics: keep serving this long after the job ends, so a scraper collects the final values")
	fs.StringVar(&o.http, "http", "", "serve the status page at http://HOST:PORT/ (and its data at /status.json, the metrics at /metrics): loopback, e.g. 127.0.0.1:8080; another address needs --http-token-file; default off")
	fs.IntVar(&o.metricsConns, "metrics-max-conns", observe.DefaultLimits().MaxConns, "with --metrics: the most connections the metrics server holds at once; more are closed unanswered (longshore_http_connections_refused_total)")
	fs.IntVar(&o.httpConns, "http-max-conns", observe.DefaultLimits().MaxConns, "with --http: the most connections the status page's server holds at once; more are closed unanswered (longshore_http_connections_refused_total)")
	fs.StringVar(&o.httpToken, "http-token-file", "", "with --http: a file holding the bearer token every request must send; needed off loopback")
	fs.DurationVar(&o.reportEvery, "report-every", 30*time.Second, "log the job's progress (epoch, percent committed, samples/s, ranks and nodes alive) this often; 0: never")
	o.logs.Register(fs)
	o.printConfig = config.Register(fs)
	o.flags = fs
	// The file's problems are reported with the rest (all at once).
	loadErr := config.Load(fs, args, os.LookupEnv)
	if err := fs.Parse(args); err != nil {
		return o, errors.Join(loadErr, err)
	}
	o.given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.given[f.Name] = true }) // the command line or LONGSHORE_BLOCK etc.
	errs := []error{loadErr}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " ")))
	}
	if o.dataset == "" && !o.mixture.on() {
		errs = append(errs, errors.New("--dataset (or --mixture) is required"))
	}
	errs = append(errs, o.mixture.check(&o)...)

	if o.listen == "" {
		errs = append(errs, errors.New("--listen HOST:PORT is required"))
	}
	if o.gossip == "" {
		errs = append(errs, errors.New("--gossip HOST:PORT is required"))
	}
	if o.batchSize < 1 {
		errs = append(errs, fmt.Errorf("--batch-size %d: need at least 1", o.batchSize))
	}
	if _, err := dataset.MediaExtensions(o.media); err != nil {
		errs = append(errs, err)
	}
	if !(o.jobStoreRPS >= 0) || math.IsInf(o.jobStoreRPS, 0) {
		errs = append(errs, fmt.Errorf("--job-store-rps %v: need requests per second, 0 for no budget", o.jobStoreRPS))
	}
	switch o.balance {
	case "equal":
		c.Balance = cluster.EqualSteps
	case "dynamic":
		c.Balance = cluster.Dynamic
	default:
		errs = append(errs, fmt.Errorf("--balance %q: want equal or dynamic", o.balance))
	}
	errs = append(errs, o.start().Check()...)
	if o.journalKeep < 2 {
		errs = append(errs, fmt.Errorf("--journal-keep %d: need at least 2", o.journalKeep))
	}
	if o.checkEvery < 1 {
		errs = append(errs, fmt.Errorf("--journal-check-every %d: need at least 1", o.checkEvery))
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
	errs = append(errs, checkMetricsFlags(o)...)
	errs = append(errs, o.logs.Check()...)
	c.Samples = 0 // from the dataset; validated then
	if err := c.Validate(); err != nil {
		errs = append(errs, err)
	}
	return o, errors.Join(errs...)
}

// start is how the flags ask the job to start (coord.StartChoice).
func (o options) start() coord.StartChoice {
	return coord.StartChoice{Checkpoint: o.checkpoint != "", Fresh: o.fresh, Resume: o.resume, Force: o.forceResume, Fallback: o.journalFallback}
}

// shape decides the job's order block, window and shard size for a
// dataset, packed or not, and the state restored from the journal (nil:
// a fresh job): coord.Shape, with the flags given (on the command line
// or in the environment).
func (o options) shape(packed bool, restore *cluster.State) (block, window, shard int) {
	return coord.Shape(o.cluster, coord.Given{Block: o.given["block"], Window: o.given["mix-window"], Shard: o.given["shard-size"]}, packed, restore)
}

func main() {
	version.Exit("longshore-coordinator")
	os.Exit(runTo(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stderr io.Writer) int { return runTo(args, os.Stdout, stderr) }

func runTo(args []string, stdout, stderr io.Writer) int {
	stderr = logs.SyncWriter(stderr) // loggers and messages share it
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "longshore-coordinator: %v\n", err)
		return 2
	}
	if *o.printConfig {
		if err := config.Print(stdout, o.flags); err != nil {
			fmt.Fprintf(stderr, "longshore-coordinator: --print-config: %v\n", err)
			return 1
		}
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := coordinate(ctx, o, stderr); err != nil {
		fmt.Fprintf(stderr, "longshore-coordinator: %v\n", err)
		return 1
	}
	return 0
}

func coordinate(ctx context.Context, o options, stderr io.Writer) error {
	logger := o.logs.New(stderr, "coordinator")
	sopts := s3.DefaultOptions()
	if o.s3Endpoint != "" {
		sopts.Endpoint = o.s3Endpoint
	}
	sopts.Credentials = string(o.s3Credentials)
	dopts := dataset.DefaultDiscoverOptions()
	if o.manifest != "" {
		dopts.Layout = dataset.LayoutManifest
		dopts.Manifest = o.manifest
	}
	dopts.MediaColumn, dopts.LabelColumn = o.mediaColumn, o.labelColumn
	dopts.Extensions, _ = dataset.MediaExtensions(o.media) // checked in parseFlags
	if o.exclude != "" {
		f, err := os.Open(o.exclude)
		if err != nil {
			return fmt.Errorf("--exclude: %w", err)
		}
		dopts.Exclude, err = dataset.ReadExclusions(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("--exclude %s: %w", o.exclude, err)
		}
	}
	// /healthz and /readyz answer from here on, while the dataset and
	// the journal load (minutes from a slow store: a liveness probe must
	// not take that for a hung process); ready once in the gossip, where
	// the nodes find the coordinator.
	ready := observe.NewReadiness("reading the dataset's manifest or index")
	ob, err := startObserver(o, ready.Check, logger)
	if err != nil {
		return err
	}
	defer func() {
		if err := ob.shutdown(); err != nil {
			logger.Warn("metrics server shutdown", "err", err)
		}
	}()
	data, err := openJobData(ctx, o, sopts, dopts, logger)
	if err != nil {
		return err
	}
	defer data.close()
	facts := data.facts
	o.cluster.Samples = facts.samples
	packed, digest := facts.packed, facts.digest

	var jn *journal.Journal
	var restore *cluster.State
	var restoredGen uint64
	var peers []string
	if o.checkpoint != "" {
		ready.NotReady("loading the journal")
		var err error
		jn, restore, restoredGen, peers, err = openJournal(ctx, o, sopts, logger)
		if err != nil {
			return err
		}
		o.cluster.Incarnation = jn.Incarnation()
	}
	block, window, shard := o.shape(packed, restore)
	if block != o.cluster.Block || window != o.cluster.Window || shard != o.cluster.ShardSize {
		logger.Info("epoch order for this dataset (--block, --mix-window, --shard-size to choose; docs/packed-datasets.md)",
			"block", block, "window", window, "shard", shard, "packed", packed, "from_journal", restore != nil && !o.given["block"])
	}
	if o.mixture.on() {
		// Leases and quotas of whole rounds: every rank's batch of whole
		// rounds is exact (docs/mixtures.md).
		if shard, err = data.alignShard(shard, o.given["shard-size"]); err != nil {
			return err
		}
		o.cluster.Align = data.round
	}
	o.cluster.Block, o.cluster.Window, o.cluster.ShardSize = block, window, shard
	if jn != nil {
		id := journal.Identity{Digest: digest, Seed: o.cluster.Seed, Block: block, Window: window, BatchSize: o.batchSize, Epochs: o.cluster.Epochs}
		if err := jn.Identify(id, o.forceResume); err != nil {
			return fmt.Errorf("--checkpoint %s: %w", o.checkpoint, err)
		}
	}

	var commitLog io.Writer
	if o.commitLog != "" {
		f, err := os.OpenFile(o.commitLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("--commit-log: %w", err)
		}
		defer f.Close()
		// Each coordinator life starts with the generation it continues
		// from (0: a fresh job), so a reader can tell which earlier acks
		// a restore rewound: those of later generations.
		if _, err := fmt.Fprintf(f, "life\t%d\t%d\n", o.cluster.Incarnation, restoredGen); err != nil {
			return fmt.Errorf("--commit-log: %w", err)
		}
		commitLog = f
	}
	var mem atomic.Pointer[gossip.Membership]
	reload := o.sec.CatchReload(logger)
	keys, ropts, err := o.sec.Load(logger)
	if err != nil {
		return err
	}

	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	defer sys.Shutdown()
	rem, actorAddr, err := wire.StartRemote(sys, o.listen, o.advertise, ropts...)
	if err != nil {
		return err
	}
	defer rem.Shutdown(false)
	ccfg := coord.Config{
		Cluster: o.cluster, BatchSize: o.batchSize, Digest: digest,
		TickEvery: o.tick, CommitLog: commitLog, Logger: logger,
		Restore: restore, CheckEvery: o.checkEvery, JobStoreRPS: o.jobStoreRPS,
		Peers: func() []string {
			m := mem.Load()
			if m == nil {
				return nil
			}
			var out []string
			for _, mb := range m.Members() {
				if mb.Meta.Role == gossip.RoleNode && !mb.Meta.Leaving {
					out = append(out, mb.Addr)
				}
			}
			sort.Strings(out)
			return out
		},
	}
	if o.mixture.on() {
		// For the status page's per-source counts (coord.Status.Mixture).
		if ccfg.Mixture, err = data.mixture(o.cluster.Seed, block, cluster.EffectiveWindow(block, window)); err != nil {
			return err
		}
	}
	var meter *observe.JournalMeter
	if jn != nil {
		meter = observe.NewJournalMeter(jn)
		ccfg.Journal = meter
	}
	co, err := coord.Start(sys, ccfg)
	if err != nil {
		return err
	}
	defer co.Shutdown(context.Background())
	job := observe.JobInfo{Dataset: data.name, Samples: o.cluster.Samples, Epochs: o.cluster.Epochs, BatchSize: o.batchSize,
		Balance: o.cluster.Balance.String(), Checkpoint: o.checkpoint}
	// Journal loaded, control port serving: ready once in the gossip.
	ready.NotReady("joining the gossip")
	ob.attach(o, observe.CoordSource{Status: co.Status, Samples: o.cluster.Samples, Epochs: o.cluster.Epochs, Journal: meter,
		Gossip: observe.GossipStreams(&mem)}, job, logger)
	defer ob.linger(ctx, o.metricsLinger) // before the coordinator stops: the final values

	gcfg := gossip.Config{
		Meta:          gossip.Meta{ID: "coordinator", Role: gossip.RoleCoordinator, ActorAddr: actorAddr, Incarnation: uint64(time.Now().UnixNano())},
		BindAddr:      o.gossip,
		AdvertiseAddr: o.gossipAdvertise,
		Profile:       o.gossipProfile,
		Keys:          keys,

		MaxInboundStreams: o.gossipStreams,
		MaxStreamBytes:    o.gossipBytes,
	}
	if o.join != "" {
		peers = append(strings.Split(o.join, ","), peers...)
	}
	m, err := startGossip(ctx, gcfg, peers, logger)
	if err != nil {
		return err
	}
	mem.Store(m)
	defer m.Shutdown(context.Background())
	ready.Ready()
	defer reload.Go(m)() // SIGHUP: reload --gossip-key-file
	logger.Info("coordinating", "dataset", data.name, "samples", o.cluster.Samples, "epochs", o.cluster.Epochs,
		"batch", o.batchSize, "shard", o.cluster.ShardSize, "balance", o.cluster.Balance.String(),
		"gossip", m.Addr(), "actor", actorAddr)
	go func() {
		for ev := range m.Events() {
			co.Membership(ev)
		}
	}()

	select {
	case <-co.Done():
	case err := <-co.Fatal():
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
	// Let the nodes deliver their last padding and leave.
	deadline := time.Now().Add(o.linger)
	for time.Now().Before(deadline) && liveNodes(m) > 0 {
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if n := liveNodes(m); n > 0 {
		logger.Warn("nodes still present after --linger; exiting anyway", "nodes", n)
	}
	return nil
}

// logCredentials says where an S3 store's keys come from (never a
// secret); other stores need none.
func logCredentials(logger *slog.Logger, st storage.Store) {
	if s, ok := st.(*s3.Store); ok {
		logger.Info("s3 credentials", "store", s.String(), "source", s.CredentialSource())
	}
}

// openJournal opens the journal at --checkpoint and decides where the job
// starts: the state to restore (nil: fresh), the generation it comes
// from (0: fresh) and the gossip members the journal recorded.
func openJournal(ctx context.Context, o options, sopts s3.Options, logger *slog.Logger) (*journal.Journal, *cluster.State, uint64, []string, error) {
	loc, err := storage.ParseURL(o.checkpoint)
	if err != nil {
		return nil, nil, 0, nil, fmt.Errorf("--checkpoint: %w", err)
	}
	if loc.Scheme == "file" {
		// A directory is created; a bucket must exist (a typo in a bucket
		// name must not start a job whose journal nobody will find).
		if err := os.MkdirAll(loc.Path, 0o755); err != nil {
			return nil, nil, 0, nil, fmt.Errorf("--checkpoint: %w", err)
		}
	}
	store, err := stores.Open(ctx, o.checkpoint, sopts)
	if err != nil {
		return nil, nil, 0, nil, fmt.Errorf("--checkpoint %s: %w", o.checkpoint, err)
	}
	logCredentials(logger, store)
	jc := journal.DefaultConfig()
	jc.Store, jc.Keep, jc.Logger = store, o.journalKeep, logger
	jn, err := journal.Open(ctx, jc)
	if err != nil {
		return nil, nil, 0, nil, fmt.Errorf("--checkpoint: %w", err)
	}
	e, err := jn.Start(ctx, journal.StartOptions{Fresh: o.fresh, Resume: o.resume, Fallback: o.journalFallback})
	if err != nil {
		return nil, nil, 0, nil, fmt.Errorf("--checkpoint %s: %w", o.checkpoint, err)
	}
	if e == nil {
		logger.Info("journal: starting the job fresh", "checkpoint", store.String(), "job", fmt.Sprintf("%016x", jn.Job()),
			"generations_before", len(jn.Generations()), "incarnation", jn.Incarnation())
		return jn, nil, 0, nil, nil
	}
	logger.Info("journal: continuing", "checkpoint", store.String(), "job", fmt.Sprintf("%016x", jn.Job()), "gen", e.Gen,
		"written", e.Written.Format(time.RFC3339Nano), "epochs_started", len(e.State.Epochs),
		"newest_gen", jn.Incarnation()-1, "incarnation", jn.Incarnation(), "resume_token", o.resume != "")
	return jn, &e.State, e.Gen, e.Peers, nil
}

// startGossip starts the coordinator's membership, joining peers if any
// answers: after a restart they are the nodes the journal recorded, which
// would otherwise never hear of the new coordinator. If none answers (the
// whole cluster restarts, nodes come later and --join us), it starts alone.
func startGossip(ctx context.Context, c gossip.Config, peers []string, logger *slog.Logger) (*gossip.Membership, error) {
	if len(peers) > 0 {
		jctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c.Join = peers
		m, err := gossip.Start(jctx, c)
		cancel()
		if err == nil {
			logger.Info("rejoined gossip", "peers", peers)
			return m, nil
		}
		logger.Warn("no recorded member answered; waiting for nodes to join", "peers", peers, "err", err)
		c.Join = nil
	}
	return gossip.Start(ctx, c)
}

func liveNodes(m *gossip.Membership) int {
	k := 0
	for _, mem := range m.Members() {
		if mem.Meta.Role == gossip.RoleNode && !mem.Meta.Leaving {
			k++
		}
	}
	return k
}

// jobData is what the coordinator needs of the dataset: never its
// sample list.
type jobData struct {
	samples int64
	packed  bool
	digest  string
}

// datasetFacts finds the dataset's count, layout and digest in the
// cheapest way its layout allows: from the manifest's index (a small
// GET and a piece of the manifest); else by streaming the manifest once
// (twice for class-name labels) in pieces, in O(1) memory, logging the
// progress; else (an ImageFolder, or --exclude, which needs the keys) by
// discovering the sample list and letting it go.
func datasetFacts(ctx context.Context, o options, sopts s3.Options, dopts dataset.DiscoverOptions, logger *slog.Logger) (storage.Store, jobData, error) {
	if len(dopts.Exclude) == 0 {
		s, err := stores.Open(ctx, o.dataset, sopts)
		if err != nil {
			return nil, jobData{}, fmt.Errorf("dataset %s: %w", o.dataset, err)
		}
		logCredentials(logger, s)
		facts, ok, err := manifestFacts(ctx, s, o.manifest, logger)
		if err != nil {
			storage.Close(s)
			return nil, jobData{}, fmt.Errorf("dataset %s: %w", o.dataset, err)
		}
		if ok {
			return s, facts, nil
		}
		storage.Close(s)
	}
	s, err := stores.Open(ctx, o.dataset, sopts)
	if err != nil {
		return nil, jobData{}, fmt.Errorf("dataset %s: %w", o.dataset, err)
	}
	store, ds, err := dataset.Open(ctx, s, o.dataset, dopts, nil)
	if err != nil {
		return nil, jobData{}, err
	}
	logCredentials(logger, store)
	if ds.Excluded > 0 {
		logger.Info("samples left out by --exclude (give the nodes the same file)", "excluded", ds.Excluded, "samples", len(ds.Samples))
	}
	if dopts.Manifest == "" && len(dopts.Exclude) == 0 {
		listing.WriteManifest(ctx, store, ds, dopts.Extensions, o.writeManifestOver, logger)
	}
	facts := jobData{samples: int64(len(ds.Samples)), packed: ds.Packed(), digest: dataset.ManifestDigest(ds)}
	// The sample list is needed only for its count, layout and digest: let
	// it go, and give its memory back to the system now rather than at
	// the runtime's leisure, so the coordinator's footprint is its state
	// (O(shards)), not the manifest's (hundreds of bytes a sample).
	ds = nil
	debug.FreeOSMemory()
	return store, facts, nil
}

// manifestFacts reads the facts of the manifest key (empty: the root's
// manifest.csv or manifest.jsonl) from its index, or by scanning it;
// false when there is no manifest.
func manifestFacts(ctx context.Context, s storage.Store, key string, logger *slog.Logger) (jobData, bool, error) {
	keys := []string{dataset.ManifestCSVName, dataset.ManifestJSONLName}
	if key != "" {
		keys = []string{key}
	}
	var found []string
	for _, k := range keys {
		m, err := dataset.OpenIndexedManifest(ctx, s, k, dataset.IndexedConfig{CacheBytes: 1})
		if err == nil {
			x := m.Index()
			m.Close()
			logger.Info("dataset from the manifest's index", "manifest", k, "samples", x.Samples, "layout", x.Layout(), "digest", x.Digest)
			return jobData{samples: x.Samples, packed: x.PackedSamples > 0, digest: x.Digest}, true, nil
		}
		if !errors.Is(err, storage.ErrNotFound) {
			return jobData{}, false, err
		}
		if _, err := s.Stat(ctx, k); err == nil {
			found = append(found, k)
		} else if !errors.Is(err, storage.ErrNotFound) {
			return jobData{}, false, err
		}
	}
	switch {
	case len(found) == 0 && key != "":
		return jobData{}, false, fmt.Errorf("manifest %s: %w", key, storage.ErrNotFound)
	case len(found) == 0:
		return jobData{}, false, nil
	case len(found) > 1:
		return jobData{}, false, fmt.Errorf("both %s and %s exist: set --manifest", found[0], found[1])
	}
	start := time.Now()
	last := start
	x, err := dataset.ScanManifest(ctx, s, found[0], dataset.ScanOptions{Progress: func(p dataset.ScanProgress) {
		if time.Since(last) >= 5*time.Second {
			last = time.Now()
			logger.Info("reading the manifest for its count and digest (longshore-manifest --index makes this instant)",
				"pass", p.Pass, "samples", p.Samples, "bytes", p.Bytes, "size", p.Size)
		}
	}})
	if err != nil {
		return jobData{}, false, fmt.Errorf("manifest %s: %w", found[0], err)
	}
	logger.Info("dataset from its manifest, streamed", "manifest", found[0], "samples", x.Samples, "layout", x.Layout(),
		"digest", x.Digest, "seconds", time.Since(start).Seconds())
	return jobData{samples: x.Samples, packed: x.PackedSamples > 0, digest: x.Digest}, true, nil
}
