package journal

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/internal/clock"
	"github.com/longshore/longshore/storage"
)

// Errors, tested with errors.Is. Each says what to do.
var (
	// ErrSuperseded: another coordinator wrote the generation this one
	// meant to write. This coordinator is stale: it must stop at once,
	// sending nothing more (it acknowledged nothing that is not durable).
	ErrSuperseded = errors.New("journal: superseded by another coordinator of this job; this one steps down (run one coordinator per --checkpoint)")
	// ErrCorrupt: a generation fails its checksum or does not parse.
	ErrCorrupt = errors.New("journal: corrupt entry")
	// ErrExists: Start was asked for a fresh job where a journal exists.
	ErrExists = errors.New("journal: a journal already exists at this location")
	// ErrNoJournal: a token was given but the location holds no journal.
	ErrNoJournal = errors.New("journal: no journal at this location")
	// ErrBadToken: the token is damaged or is another job's.
	ErrBadToken = errors.New("journal: bad resume token")
	// ErrPruned: the token's generation is no longer kept (Config.Keep).
	ErrPruned = errors.New("journal: the token's generation is no longer kept")
)

// Config configures a Journal. The zero value of every field but Store
// has a meaning (see DefaultConfig).
type Config struct {
	// Store holds the journal; its root is the --checkpoint location.
	Store storage.Store
	// Keep is how many generations are kept for older tokens; >= 2 (the
	// newest and one to fall back to). 0: DefaultConfig's.
	Keep int
	// Retries is how many times a failed put or read is retried before
	// Write gives up. 0: DefaultConfig's; < 0: none.
	Retries int
	// Backoff is the first retry's delay, doubled each retry. 0: default.
	Backoff time.Duration
	// Clock reads the time for Entry.Written and waits out the retries'
	// backoff; nil: the system clock.
	Clock clock.Clock
	// Logger gets fallbacks past corrupt entries and failed prunes; nil
	// discards.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults, with the reasons.
func DefaultConfig() Config {
	return Config{
		// A generation is written per acknowledged commit round, and
		// trainers commit when they save a model: 4096 generations cover
		// hours of checkpoints even with many ranks committing apart,
		// at ~100 bytes to a few KB each, and listing them at start is a
		// handful of S3 list pages.
		Keep: 4096,
		// S3 answers 5xx and throttles now and then; the store client
		// already retries those, so these few cover a lost answer or a
		// short outage while the coordinator holds its acks back.
		Retries: 4,
		Backoff: 100 * time.Millisecond,
	}
}

// Journal is one coordinator's handle on the journal. Not safe for
// concurrent use: the coordinator actor owns it.
type Journal struct {
	cfg   Config
	log   *slog.Logger
	gens  []uint64 // generations listed at Open, ascending
	next  uint64   // the generation the next Write creates
	job   uint64
	begun bool
	last  []byte // the last entry written, to compare with what a retry finds
	// fallback: Latest may fall back past a corrupt newest generation
	// (StartOptions.Fallback).
	fallback bool
	// restored is the generation Start continues from (nil: fresh);
	// ident the job's identity (Identify), recorded in every write and
	// token.
	restored *Entry
	ident    Identity
	// archived are the epochs whose lineage this journal queued for
	// archiving, pending those not written yet (see archive.go).
	archived map[int]bool
	pending  []archive
}

const genPrefix = "gen/"

func genKey(g uint64) string { return fmt.Sprintf("%s%020d", genPrefix, g) }

// Open lists the journal at cfg.Store. It fails if the store cannot be
// listed (missing bucket, refused credentials), with the store's error.
func Open(ctx context.Context, cfg Config) (*Journal, error) {
	d := DefaultConfig()
	if cfg.Store == nil {
		return nil, errors.New("journal: Config.Store is nil")
	}
	if cfg.Keep == 0 {
		cfg.Keep = d.Keep
	}
	if cfg.Keep < 2 {
		return nil, fmt.Errorf("journal: Keep = %d, want >= 2", cfg.Keep)
	}
	if cfg.Retries == 0 {
		cfg.Retries = d.Retries
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = d.Backoff
	}
	cfg.Clock = clock.Or(cfg.Clock)
	j := &Journal{cfg: cfg, log: cfg.Logger, archived: map[int]bool{}}
	if j.log == nil {
		j.log = slog.New(slog.DiscardHandler)
	}
	err := cfg.Store.List(ctx, genPrefix, func(oi storage.ObjectInfo) error {
		g, err := strconv.ParseUint(strings.TrimPrefix(oi.Key, genPrefix), 10, 64)
		if err != nil || g == 0 {
			j.log.Warn("journal: ignoring foreign object", "key", oi.Key)
			return nil
		}
		j.gens = append(j.gens, g)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", cfg.Store, err)
	}
	j.next = 1
	if n := len(j.gens); n > 0 {
		j.next = j.gens[n-1] + 1
	}
	return j, nil
}

// Generations returns the generations listed at Open, oldest first.
func (j *Journal) Generations() []uint64 { return append([]uint64(nil), j.gens...) }

// Incarnation is the incarnation the coordinator must run with: the
// generation its first Write creates. It is larger than every
// incarnation that ever wrote to this journal.
func (j *Journal) Incarnation() uint64 { return j.next }

// Job is the job id (valid after Start).
func (j *Journal) Job() uint64 { return j.job }

// Load reads generation g.
func (j *Journal) Load(ctx context.Context, g uint64) (Entry, error) {
	b, err := j.get(ctx, genKey(g))
	if err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			return Entry{}, fmt.Errorf("%w: generation %d is not in %s (kept: the last %d)", ErrPruned, g, j.cfg.Store, j.cfg.Keep)
		}
		return Entry{}, fmt.Errorf("journal %s: read generation %d: %w", j.cfg.Store, g, err)
	}
	e, err := Decode(b)
	if err != nil {
		return Entry{}, fmt.Errorf("journal %s generation %d: %w", j.cfg.Store, g, err)
	}
	if e.Gen != g {
		return Entry{}, fmt.Errorf("%w: object of generation %d holds generation %d", ErrCorrupt, g, e.Gen)
	}
	return e, nil
}

// Latest returns the newest generation. A newest generation that is
// corrupt is an error (ErrCorrupt, naming the object and the cause): the
// acks the coordinator sent after the previous generation would be
// issued again — duplicates in the trainers' history — so falling back
// is a decision for the operator (StartOptions.Fallback, the
// coordinator's --journal-fallback), never taken silently. With it,
// Latest falls back past corrupt generations and logs which. It fails
// with ErrNoJournal if there is none; a store error (access, network) is
// returned as is — never taken for "no journal".
func (j *Journal) Latest(ctx context.Context) (Entry, error) {
	if len(j.gens) == 0 {
		return Entry{}, fmt.Errorf("%w: %s", ErrNoJournal, j.cfg.Store)
	}
	var first error
	newest := j.gens[len(j.gens)-1]
	for i := len(j.gens) - 1; i >= 0; i-- {
		e, err := j.Load(ctx, j.gens[i])
		if err == nil {
			if first != nil {
				j.log.Warn("journal: --journal-fallback: continuing from an older generation past corrupt ones; acks sent after it are issued again (duplicates in the trainers' history)",
					"to", e.Gen, "newest", newest, "err", first)
			}
			return e, nil
		}
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrPruned) {
			return Entry{}, err
		}
		if first == nil {
			first = err
			if errors.Is(err, ErrCorrupt) && !j.fallback {
				return Entry{}, fmt.Errorf("newest generation %s/%s: %w; the coordinator will not guess: restore the object, "+
					"or pass --journal-fallback to continue from the previous generation (commits acknowledged after it are issued again), or --fresh to start the job over",
					j.cfg.Store, genKey(j.gens[i]), err)
			}
		}
		j.log.Warn("journal: unreadable generation", "gen", j.gens[i], "err", err)
	}
	return Entry{}, fmt.Errorf("journal %s: no readable generation among %d (newest: %w); pass --fresh to start the job over", j.cfg.Store, len(j.gens), first)
}

// StartOptions say how the job starts.
type StartOptions struct {
	// Fresh starts the job from scratch even if a journal exists (its
	// history is kept; tokens of the old run no longer resume).
	Fresh bool
	// Resume, if set, is a token to restore: that generation's state.
	Resume string
	// Fallback lets Start continue from the newest readable generation
	// when the newest is corrupt (see Latest).
	Fallback bool
}

// Start decides where the job starts and fixes the job id for writes:
// with Resume, that token's generation (ErrBadToken for another job's
// token, ErrPruned if it is gone); with Fresh, or if the location holds
// no journal, a new job (returned Entry nil); otherwise the newest
// readable generation. It never starts fresh over an existing journal
// unless Fresh says so.
func (j *Journal) Start(ctx context.Context, o StartOptions) (*Entry, error) {
	if j.begun {
		return nil, errors.New("journal: Start called twice")
	}
	if o.Fresh && o.Resume != "" {
		return nil, errors.New("journal: --fresh and --resume contradict each other: choose one")
	}
	j.fallback = o.Fallback
	var e *Entry
	switch {
	case o.Resume != "":
		t, err := ParseToken(o.Resume)
		if err != nil {
			return nil, err
		}
		if len(j.gens) == 0 {
			return nil, fmt.Errorf("%w %s, but a resume token was given: is --checkpoint the job's location?", ErrNoJournal, j.cfg.Store)
		}
		got, err := j.Load(ctx, t.Gen)
		if err != nil {
			return nil, fmt.Errorf("resume token (generation %d): %w", t.Gen, err)
		}
		if got.Job != t.Job {
			return nil, fmt.Errorf("%w: token is job %016x, the journal at %s is job %016x", ErrBadToken, t.Job, j.cfg.Store, got.Job)
		}
		e = &got
	case o.Fresh || len(j.gens) == 0:
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("journal: job id: %w", err)
		}
		j.job = binary.LittleEndian.Uint64(b[:])
		j.begun = true
		return nil, nil
	default:
		got, err := j.Latest(ctx)
		if err != nil {
			return nil, err
		}
		e = &got
	}
	j.job = e.Job
	j.begun = true
	j.restored = e
	// The generation continued from may hold a completed epoch's trails
	// whose archive was not written (or is of a rewound later history).
	j.queueArchives(*e)
	return e, nil
}

// Identify fixes the job's identity, which every later Write records and
// every Token carries, and checks it against the generation Start
// continues from: a difference is an error wrapping ErrMismatch that
// names each, unless force is set and the order survives every one
// (Diff's Forceable): then it is logged as a warning and the job
// continues. A generation from before identities (no digest) cannot be
// checked beyond its seed, block and window: that is logged, and the
// next write records the identity.
func (j *Journal) Identify(id Identity, force bool) error {
	if !j.begun {
		return errors.New("journal: Identify before Start")
	}
	if e := j.restored; e != nil {
		was := e.Identity()
		diffs := Diff(was, id)
		what := fmt.Sprintf("the journal at %s (generation %d) is for another job than these flags", j.cfg.Store, e.Gen)
		if len(diffs) > 0 {
			forceable := true
			for _, d := range diffs {
				forceable = forceable && d.Forceable
			}
			if !force || !forceable {
				return MismatchError(what, diffs, force)
			}
			for _, d := range diffs {
				j.log.Warn("journal: --force-resume: continuing although the job differs", "field", d.Field, "journal", d.Was, "now", d.Now)
			}
		}
		if !was.Known() {
			j.log.Warn("journal: the generation continued from was written before journals recorded the dataset digest, batch size and epochs: only the seed, block and window could be checked; the next write records them",
				"gen", e.Gen, "digest", id.Digest, "batch_size", id.BatchSize, "epochs", id.Epochs)
		}
	}
	j.ident = id
	return nil
}

// Identity is the job's identity as Identify fixed it.
func (j *Journal) Identity() Identity { return j.ident }

// Write makes s durable as the next generation and returns it. The
// coordinator sends the acks of the commits s includes only after Write
// returned nil. ErrSuperseded means another coordinator holds the job;
// any other error means the write is in doubt and the coordinator must
// stop (a restart restores the newest generation, whichever it is).
func (j *Journal) Write(ctx context.Context, s cluster.State, peers []string) (uint64, error) {
	if !j.begun {
		return 0, errors.New("journal: Write before Start")
	}
	// A completed epoch's trails leave the generations once another
	// completes: its archive must be written first.
	if err := j.flushArchives(ctx); err != nil {
		return 0, err
	}
	g := j.next
	entry := Entry{Gen: g, Job: j.job, Written: j.cfg.Clock.Now(), State: s, Peers: peers,
		Digest: j.ident.Digest, BatchSize: j.ident.BatchSize, Epochs: j.ident.Epochs}
	b := Encode(j.last[:0], entry)
	j.last = b
	key := genKey(g)
	var err error
	for attempt := 0; ; attempt++ {
		_, err = j.cfg.Store.Put(ctx, key, b, storage.Cond{IfAbsent: true})
		if errors.Is(err, storage.ErrPrecondition) {
			// Taken: by us (a put that landed but lost its answer) or by
			// another coordinator.
			var got []byte
			got, err = j.get(ctx, key)
			if err == nil {
				if !bytes.Equal(got, b) {
					who := "unreadable"
					if e, derr := Decode(got); derr == nil {
						who = fmt.Sprintf("incarnation %d at %s", e.State.Incarnation, e.Written.Format(time.RFC3339Nano))
					}
					return 0, fmt.Errorf("%w: generation %d of %s was written by %s; this coordinator is incarnation %d",
						ErrSuperseded, g, j.cfg.Store, who, s.Incarnation)
				}
			}
		}
		if err == nil || ctx.Err() != nil || attempt >= j.cfg.Retries {
			break
		}
		j.backoff(ctx, attempt)
	}
	if err != nil {
		return 0, fmt.Errorf("journal %s: write generation %d: %w", j.cfg.Store, g, err)
	}
	j.next++
	j.queueArchives(entry)
	if err := j.flushArchives(ctx); err != nil {
		j.log.Warn("journal: lineage archive (retried before the next generation)", "err", err)
	}
	if old := int64(g) - int64(j.cfg.Keep); old >= 1 {
		if err := j.cfg.Store.Delete(ctx, genKey(uint64(old))); err != nil {
			j.log.Warn("journal: prune", "gen", old, "err", err)
		}
	}
	return g, nil
}

// Check reports ErrSuperseded if another coordinator has written the
// generation this one would write next. The coordinator calls it on an
// interval, so a stale one steps down even when it has nothing to write.
func (j *Journal) Check(ctx context.Context) error {
	_, err := j.cfg.Store.Stat(ctx, genKey(j.next))
	switch {
	case err == nil:
		return fmt.Errorf("%w: generation %d of %s exists", ErrSuperseded, j.next, j.cfg.Store)
	case errors.Is(err, storage.ErrNotFound):
		return nil
	}
	return fmt.Errorf("journal %s: check: %w", j.cfg.Store, err)
}

// Token returns the resume token of a commit (epoch, step) made durable
// by generation g.
func (j *Journal) Token(g uint64, epoch int, step int64) Token {
	return Token{Job: j.job, Gen: g, Epoch: epoch, Step: step, Ident: j.ident}
}

func (j *Journal) get(ctx context.Context, key string) ([]byte, error) {
	var b []byte
	var err error
	for attempt := 0; ; attempt++ {
		b, err = j.cfg.Store.Get(ctx, key, nil)
		if err == nil || errors.Is(err, storage.ErrNotFound) || ctx.Err() != nil || attempt >= j.cfg.Retries {
			return b, err
		}
		j.backoff(ctx, attempt)
	}
}

// backoff waits before retry attempt+1: Backoff doubled per attempt, or
// until ctx is done.
func (j *Journal) backoff(ctx context.Context, attempt int) {
	t, c := j.cfg.Clock.NewTimer(j.cfg.Backoff << attempt)
	defer t.Stop()
	select {
	case <-c:
	case <-ctx.Done():
	}
}
