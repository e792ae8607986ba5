package delivery

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"

	"github.com/longshore/longshore/feed"
)

// Committer turns a trainer's commit into a resume token and back. The
// feed server calls Commit when a trainer says it has saved its model
// through (epoch, step), and Resume when a trainer reconnects with a token
// from a checkpoint. The standalone implementation is LocalCommitter; the
// cluster's agent implements it against the coordinator and the journal.
//
// Concurrency contract: called from the rank's connection goroutine, one
// call at a time per rank, concurrently across ranks. Commit may block (a
// round trip to the coordinator) and must return promptly with ctx.Err()
// once ctx is done.
type Committer interface {
	// Commit records that rank's trainer consumed every batch through
	// (epoch, step) and returns an opaque token that restores exactly that
	// position.
	Commit(ctx context.Context, rank int, epoch int, step int64) (token []byte, err error)
	// Resume decodes a token Commit returned for rank into the committed
	// (epoch, step). A token from another job or rank, or a damaged one,
	// is an error wrapping ErrBadToken.
	Resume(ctx context.Context, rank int, token []byte) (epoch int, step int64, err error)
}

// LocalCommitter is the standalone Committer: the token is self-contained
// (job, rank, epoch, step, the rank's stream offset after the step, the
// batch size and the run's identity, with a CRC), nothing is stored, and
// any token this job's committer made for the rank resumes it — at the
// sample position it names, whatever the batch size now (see Resume).
type LocalCommitter struct {
	// Job names the job in tokens; a token from another job is refused.
	Job string
	// BatchSize is samples per batch, to record the stream offset.
	BatchSize int
	// Ident is the run's identity (zero: unknown, not checked): tokens
	// carry it and Resume refuses a token whose identity differs.
	Ident RunIdentity
	// StreamLen is how many samples each rank gets per epoch (0:
	// unknown): a token made at an epoch's end then resumes the next
	// epoch with any batch size.
	StreamLen int64
	// Force accepts a token whose dataset digest (of the same sample
	// count) or epoch count differ (--force-resume); never another order.
	Force bool
}

// RunIdentity is what fixes the samples a standalone rank's stream
// positions name: the dataset (its manifest digest, dataset.ManifestDigest,
// which counts the samples) and the order (seed, block, window as in
// force — 1 with block 1 —, ranks), and the epoch count.
type RunIdentity struct {
	Digest string
	Seed   uint64
	Block  int
	Window int
	Ranks  int
	Epochs int
}

// Known reports whether the identity was recorded.
func (id RunIdentity) Known() bool { return id.Digest != "" }

var _ Committer = LocalCommitter{}

const tokenMagic = "LSTK"

// Token versions: 1 had job, rank, epoch, step and offset; 2 adds the
// batch size and the run's identity. Both are read.
const tokenVersion = 2

// Commit encodes the token; it never blocks.
func (c LocalCommitter) Commit(ctx context.Context, rank, epoch int, step int64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if rank < 0 || epoch < 0 || step < 0 {
		return nil, fmt.Errorf("feed: commit rank %d epoch %d step %d", rank, epoch, step)
	}
	if len(c.Job) > 1024 || len(c.Ident.Digest) > 1024 {
		return nil, fmt.Errorf("feed: job name of %d bytes, digest of %d", len(c.Job), len(c.Ident.Digest))
	}
	b := make([]byte, 0, 80+len(c.Job)+len(c.Ident.Digest))
	b = append(b, tokenMagic...)
	b = append(b, tokenVersion)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(c.Job)))
	b = append(b, c.Job...)
	b = binary.LittleEndian.AppendUint32(b, uint32(rank))
	b = binary.LittleEndian.AppendUint32(b, uint32(epoch))
	b = binary.LittleEndian.AppendUint64(b, uint64(step))
	b = binary.LittleEndian.AppendUint64(b, uint64((step+1)*int64(c.BatchSize)))
	id := c.Ident
	for _, v := range []int{c.BatchSize, id.Block, id.Window, id.Ranks, id.Epochs} {
		b = binary.LittleEndian.AppendUint32(b, uint32(max(v, 0)))
	}
	b = binary.LittleEndian.AppendUint64(b, id.Seed)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(id.Digest)))
	b = append(b, id.Digest...)
	return binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b)), nil
}

// LocalToken is a decoded LocalCommitter token.
type LocalToken struct {
	Version int
	Job     string
	Rank    int
	Epoch   int
	Step    int64
	Offset  int64 // stream position after Step: (Step+1)*BatchSize
	// BatchSize is the batch size the token was made with (version 1:
	// Offset/(Step+1)).
	BatchSize int
	// Ident is the run's identity (version 1, or a committer without
	// one: unknown).
	Ident RunIdentity
}

// DecodeLocalToken parses a LocalCommitter token, of version 1 or 2.
func DecodeLocalToken(tok []byte) (LocalToken, error) {
	bad := func(why string) (LocalToken, error) { return LocalToken{}, fmt.Errorf("%w: %s", feed.ErrBadToken, why) }
	if len(tok) < 4+1+2+4+4+8+8+4 || !bytes.HasPrefix(tok, []byte(tokenMagic)) {
		return bad("not a longshore standalone token")
	}
	body, sum := tok[:len(tok)-4], binary.LittleEndian.Uint32(tok[len(tok)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return bad("checksum mismatch (damaged)")
	}
	v := int(body[4])
	if v < 1 || v > tokenVersion {
		return bad(fmt.Sprintf("token version %d (this build reads 1 to %d)", v, tokenVersion))
	}
	jl := int(binary.LittleEndian.Uint16(body[5:7]))
	if len(body) < 7+jl+24 {
		return bad("wrong length")
	}
	rest := body[7+jl:]
	t := LocalToken{
		Version: v,
		Job:     string(body[7 : 7+jl]),
		Rank:    int(binary.LittleEndian.Uint32(rest[0:4])),
		Epoch:   int(binary.LittleEndian.Uint32(rest[4:8])),
		Step:    int64(binary.LittleEndian.Uint64(rest[8:16])),
		Offset:  int64(binary.LittleEndian.Uint64(rest[16:24])),
	}
	rest = rest[24:]
	switch v {
	case 1:
		if len(rest) != 0 {
			return bad("wrong length")
		}
		if t.Step >= 0 && t.Offset > 0 && t.Offset%(t.Step+1) == 0 {
			t.BatchSize = int(t.Offset / (t.Step + 1))
		}
	default:
		if len(rest) < 5*4+8+2 {
			return bad("wrong length")
		}
		var f [5]int
		for i := range f {
			f[i] = int(binary.LittleEndian.Uint32(rest[4*i:]))
		}
		t.BatchSize = f[0]
		t.Ident = RunIdentity{Block: f[1], Window: f[2], Ranks: f[3], Epochs: f[4], Seed: binary.LittleEndian.Uint64(rest[20:28])}
		dl := int(binary.LittleEndian.Uint16(rest[28:30]))
		if len(rest) != 30+dl {
			return bad("wrong length")
		}
		t.Ident.Digest = string(rest[30:])
	}
	if t.Epoch < 0 || t.Step < 0 || t.Rank < 0 || t.Epoch > 1<<30 || t.Offset < 0 || t.BatchSize < 0 || t.BatchSize > 1<<30 {
		return bad("out of range")
	}
	return t, nil
}

// Resume checks the token is this job's and rank's, and of this run's
// identity (a difference is refused, naming it, unless Force accepts it:
// another dataset digest of the same sample count, or another epoch
// count), and returns the step, in this committer's batch size, after
// which the token's sample position lies: with the batch size it was
// made with, its own step; with another, the position's step when the
// new size divides it, or the epoch's end when the position is past it
// (StreamLen). A position inside a batch of the new size is refused,
// naming both batch sizes: resuming there would skip or repeat samples.
func (c LocalCommitter) Resume(ctx context.Context, rank int, tok []byte) (int, int64, error) {
	t, err := DecodeLocalToken(tok)
	if err != nil {
		return 0, 0, err
	}
	if t.Job != c.Job {
		return 0, 0, fmt.Errorf("%w: token of job %q, this is job %q", feed.ErrBadToken, t.Job, c.Job)
	}
	if t.Rank != rank {
		return 0, 0, fmt.Errorf("%w: token of rank %d presented to rank %d", feed.ErrBadToken, t.Rank, rank)
	}
	if err := c.checkIdent(t.Ident); err != nil {
		return 0, 0, err
	}
	b := int64(c.BatchSize)
	if t.BatchSize == c.BatchSize || b <= 0 {
		return t.Epoch, t.Step, nil
	}
	switch {
	case t.Offset%b == 0:
		return t.Epoch, t.Offset/b - 1, nil
	case c.StreamLen > 0 && t.Offset >= c.StreamLen:
		return t.Epoch, (t.Offset+b-1)/b - 1, nil // the epoch's end
	}
	was := "an unknown batch size"
	if t.BatchSize > 0 {
		was = fmt.Sprintf("--batch-size %d", t.BatchSize)
	}
	return 0, 0, fmt.Errorf("%w: the token was made with %s after step %d of epoch %d (sample %d of the rank's epoch); with batch size %d that position falls inside step %d: restart with --batch-size %d or one that divides %d, or start the trainer without the token",
		feed.ErrBadToken, was, t.Step, t.Epoch, t.Offset, b, t.Offset/b, max(t.BatchSize, 1), t.Offset)
}

// checkIdent compares a token's identity with the committer's.
func (c LocalCommitter) checkIdent(tid RunIdentity) error {
	id := c.Ident
	if !tid.Known() || !id.Known() {
		return nil
	}
	var diffs []string
	forceable := true
	add := func(field string, was, now any, ok bool) {
		diffs = append(diffs, fmt.Sprintf("%s %v in the token, %v in this run", field, was, now))
		forceable = forceable && ok
	}
	if tid.Digest != id.Digest {
		cw, _, _ := strings.Cut(tid.Digest, ":")
		cn, _, _ := strings.Cut(id.Digest, ":")
		add("dataset digest", tid.Digest, id.Digest, cw == cn)
	}
	if tid.Seed != id.Seed {
		add("seed", tid.Seed, id.Seed, false)
	}
	if tid.Block != id.Block {
		add("block", tid.Block, id.Block, false)
	}
	if tid.Window != id.Window {
		add("mix window", tid.Window, id.Window, false)
	}
	if tid.Ranks != id.Ranks {
		add("ranks", tid.Ranks, id.Ranks, false)
	}
	if tid.Epochs != id.Epochs {
		add("epochs", tid.Epochs, id.Epochs, true)
	}
	if len(diffs) == 0 || (forceable && c.Force) {
		return nil
	}
	hint := "start the trainer without the token to start over"
	if forceable {
		hint += ", or pass the node --force-resume to resume anyway"
	}
	return fmt.Errorf("%w: the token is of another run: %s; %s", feed.ErrBadToken, strings.Join(diffs, "; "), hint)
}
