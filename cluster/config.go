package cluster

import (
	"errors"
	"fmt"
)

// Balance says how the coordinator divides an epoch among ranks.
type Balance int

const (
	// EqualSteps gives every rank that is a member of an epoch the same
	// number of positions in it (so the same number of batches): what
	// data-parallel training needs, because a rank that runs out of data
	// early leaves the others hanging in their collective ops. Work is
	// still pulled (faster loaders fetch ahead), but no rank is leased more
	// than its quota, so leases are never stolen in this mode.
	EqualSteps Balance = iota
	// Dynamic gives each rank as much as it asks for and splits a
	// straggler's lease so an idle rank can take its tail. Ranks end the
	// epoch with different numbers of steps: for consumers that do not
	// synchronize (evaluation, preprocessing, independent trainers).
	Dynamic
)

func (b Balance) String() string {
	switch b {
	case EqualSteps:
		return "equal-steps"
	case Dynamic:
		return "dynamic"
	}
	return fmt.Sprintf("Balance(%d)", int(b))
}

// Config is the coordinator's job description. The zero value is not
// valid (a job needs Samples and Epochs); start from DefaultConfig.
type Config struct {
	// Samples is N, the manifest's length: epochs permute [0, Samples).
	Samples int64
	// Seed fixes every epoch's order together with the epoch number.
	Seed uint64
	// Epochs is how many epochs the job runs; the job is done when all
	// are committed. Must be >= 1.
	Epochs int
	// ShardSize is the most positions one lease covers; leases never
	// cross a shard boundary: a multiple of ShardSize; with windows
	// (Block > 1, Window > 1), runs of ShardSize from each window's
	// start, so a shard never crosses a window; else, when Block > 1
	// divides it, the same grid laid over the order's blocks, restarting
	// after the short block (a shard of its own). In positions (samples),
	// >= 1.
	ShardSize int
	// Block is the locality block of the epoch order (see Order), in
	// samples, >= 1.
	Block int
	// Window is how many of the order's blocks one window interleaves
	// (see Order): a batch draws from that many blocks at once, and a
	// reader holds that many blocks' samples at once. When Block > 1 it
	// is also the lease grid: leases never cross a window. 1: blocks one
	// after another. Ignored when Block is 1 (a full shuffle). >= 1.
	Window int
	// Align, when > 1, is a unit every lease and quota is a whole number
	// of: the rounds of a weighted mixture (Mixture.Round), so that a
	// rank's batch of whole rounds holds each source in its exact count.
	// The shard grid is then plain (runs of ShardSize from 0, whatever
	// Block: a mixture's positions are not its sources' blocks), and
	// ShardSize and Samples must be multiples of it. With EqualSteps
	// every quota is a multiple of it too (rounded up, the rest padded
	// in whole units; with DropRemainder, down), so a lease is never cut
	// inside a unit; a rank's commit after a batch of whole units leaves
	// its uncommitted tail whole units as well. Dynamic's steals split
	// leases at whole units too (the Revoke's From; the rank rounds its
	// stop up to one when it knows the unit: RankLeases.SetAlign, the
	// node's mixture round). 0 or 1: none.
	Align int
	// Balance: EqualSteps (the zero value) or Dynamic.
	Balance Balance
	// DropRemainder, with EqualSteps, drops the tail of the epoch's order
	// that does not divide evenly among ranks (PyTorch's
	// DistributedSampler(drop_last=True)) instead of padding with repeats.
	// False (the zero value) pads.
	DropRemainder bool
	// Incarnation numbers this coordinator's life; every Fence it issues
	// carries it, so messages about an earlier life's leases are fenced.
	// A restarted coordinator must use a larger one (Restore does).
	Incarnation uint64
	// StealMin, with Dynamic, is the fewest undelivered positions a rank
	// must hold for an idle rank to take half of them. In positions, >= 1.
	StealMin int
	// RevokeTimeout is how many Ticks a rank may leave a revoke
	// unanswered before its node is evicted (fenced and its uncommitted
	// work re-issued). 0 means never.
	RevokeTimeout int
	// MinRanks holds back the first epoch until this many ranks have
	// joined, so a job started with its nodes gets equal shares from the
	// first step (torchrun's --nnodes): Requests before then are held
	// (Stats.HeldRequests) and the ranks ask again. Once the first epoch started
	// (a restored state's included) nothing is held. 0 or 1: start with
	// the first request.
	MinRanks int
	// WelcomeResend is how many Ticks a node's Welcome may go unanswered
	// (no message from any session it started) before it is sent again
	// (Ready.Welcomes), the wait doubling with each resend up to 32
	// times: a node without sessions says nothing, so a lost Welcome
	// would leave it idle for good. Nodes ignore a Welcome for sessions
	// they have. 0: never.
	WelcomeResend int
	// BatchSize is the trainers' batch size, if the shell knows it: the
	// trails (Trail) then keep only the commits that the others do not
	// imply (TrimCommits), so what a Snapshot copies of them grows with
	// the stream ends, not with the commits. 0: keep every commit (the
	// journal trims them when it writes).
	BatchSize int64
}

// DefaultConfig returns a Config with every tunable set; the caller fills
// Samples, Seed and Epochs.
func DefaultConfig() Config {
	return Config{
		Epochs: 1,
		// 256 positions: at a few hundred images/s per rank a lease lasts
		// about a second, so a dead node costs at most ~a second of
		// uncommitted-lease work beyond its commits, while a 10 M sample
		// epoch is still only ~39 k leases of coordinator state.
		ShardSize: 256,
		// 1 (no blocking): samples here are one object each, so
		// consecutive indices gain nothing by being fetched together,
		// and manifests are usually sorted by class (ImageFolder), where
		// large blocks would give class-skewed batches. Raise it for
		// packed shards (tar/WebDataset), where neighbours share an object.
		Block: 1,
		// 128 blocks: what a batch of 32 needs to draw from to come
		// within 10% of a full shuffle's distinct classes when the
		// manifest is sorted by class and a block holds about one class
		// (measured: docs/packed-datasets.md, "Shuffle quality"); 64 falls
		// to 80-90%. It matters only when Block > 1.
		Window:  DefaultWindow,
		Balance: EqualSteps,
		// Pad, as PyTorch's DistributedSampler does by default: no sample
		// is skipped in any epoch, at the cost of < ranks repeats.
		DropRemainder: false,
		Incarnation:   1,
		// A quarter shard: splitting off fewer positions than that costs
		// more in messages than it saves in tail latency.
		StealMin: 64,
		// A node answers a revoke on its next message loop turn; 30 ticks
		// (30 s at the shells' 1 s tick) means it is wedged.
		RevokeTimeout: 30,
		// Nodes ask for work every second once they have sessions: 3
		// silent ticks mean the Welcome was lost, not slow.
		WelcomeResend: 3,
	}
}

// ErrConfig is wrapped by every error Validate returns.
var ErrConfig = errors.New("cluster: invalid config")

// Validate reports every problem with c at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...))
	}
	if c.Samples < 0 {
		bad("Samples = %d, want >= 0", c.Samples)
	}
	if c.Epochs < 1 {
		bad("Epochs = %d, want >= 1", c.Epochs)
	}
	if c.ShardSize < 1 {
		bad("ShardSize = %d, want >= 1", c.ShardSize)
	}
	if c.Block < 1 {
		bad("Block = %d, want >= 1", c.Block)
	}
	if c.Window < 1 {
		bad("Window = %d, want >= 1", c.Window)
	}
	if c.Align < 0 {
		bad("Align = %d, want >= 0", c.Align)
	}
	if c.Align > 1 && (c.ShardSize%c.Align != 0 || c.Samples%int64(c.Align) != 0) {
		bad("Align = %d: ShardSize (%d) and Samples (%d) must be multiples of it", c.Align, c.ShardSize, c.Samples)
	}
	if c.Balance != EqualSteps && c.Balance != Dynamic {
		bad("Balance = %v, want EqualSteps or Dynamic", c.Balance)
	}
	if c.DropRemainder && c.Balance != EqualSteps {
		bad("DropRemainder needs Balance EqualSteps (Dynamic neither pads nor drops)")
	}
	if c.StealMin < 1 {
		bad("StealMin = %d, want >= 1", c.StealMin)
	}
	if c.RevokeTimeout < 0 {
		bad("RevokeTimeout = %d ticks, want >= 0 (0: never)", c.RevokeTimeout)
	}
	if c.MinRanks < 0 {
		bad("MinRanks = %d, want >= 0", c.MinRanks)
	}
	if c.BatchSize < 0 {
		bad("BatchSize = %d, want >= 0 (0: unknown)", c.BatchSize)
	}
	if c.WelcomeResend < 0 {
		bad("WelcomeResend = %d ticks, want >= 0 (0: never)", c.WelcomeResend)
	}
	return errors.Join(errs...)
}

// Order returns epoch's order under c.
func (c Config) Order(epoch int) Order {
	return NewOrder(c.Seed, epoch, c.Samples, c.Block, c.Window)
}

// DefaultWindow is DefaultConfig's Window, and the node's standalone
// default: standalone and cluster runs share one order.
const DefaultWindow = 128

// PackedBlock is the Block for a dataset packed in tar shards when none
// is given, on the coordinator and the standalone node alike (a plain
// dataset gets DefaultConfig's, 1). A node reads the samples of a block
// that share a shard with one ranged GET (a chunk), and holds a window's
// chunks at once: Window x PackedBlock samples, 2048 (about 225 MB of
// ImageNet JPEGs) per window. 16 samples (about 1.8 MB of JPEGs) a GET
// keeps a request's fixed cost (about 1 ms of MinIO's CPU) to a sixteenth
// of reading sample by sample, while a window of 128 such blocks mixes a
// class-sorted packing nearly as well as a full shuffle; larger blocks
// would cost that much more memory for the same mixing.
const PackedBlock = 16

// DefaultBlock is the Block for a dataset when none is given, on the
// coordinator and the standalone node alike: PackedBlock for one packed
// in tar shards, else DefaultConfig's (1, a full shuffle: one object per
// sample gains nothing from blocks).
func DefaultBlock(packed bool) int {
	if packed {
		return PackedBlock
	}
	return DefaultConfig().Block
}

// EffectiveWindow is the window an order with block and window uses: 1
// when block is 1 (a full shuffle has nothing to interleave) or window
// is below 1 (a state or job from before windows), else window.
func EffectiveWindow(block, window int) int {
	if block <= 1 || window <= 1 {
		return 1
	}
	return window
}
