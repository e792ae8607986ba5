package feedserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/longshore/longshore/actors/feed"
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
// (job, rank, epoch, step and the rank's stream offset after the step,
// with a CRC), nothing is stored, and any token this job's committer made
// for the rank resumes it.
type LocalCommitter struct {
	// Job names the job in tokens; a token from another job is refused.
	Job string
	// BatchSize is samples per batch, to record the stream offset.
	BatchSize int
}

var _ Committer = LocalCommitter{}

const tokenMagic = "LSTK"
const tokenVersion = 1

// Commit encodes the token; it never blocks.
func (c LocalCommitter) Commit(ctx context.Context, rank, epoch int, step int64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if rank < 0 || epoch < 0 || step < 0 {
		return nil, fmt.Errorf("feed: commit rank %d epoch %d step %d", rank, epoch, step)
	}
	if len(c.Job) > 1024 {
		return nil, fmt.Errorf("feed: job name of %d bytes", len(c.Job))
	}
	b := make([]byte, 0, 40+len(c.Job))
	b = append(b, tokenMagic...)
	b = append(b, tokenVersion)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(c.Job)))
	b = append(b, c.Job...)
	b = binary.LittleEndian.AppendUint32(b, uint32(rank))
	b = binary.LittleEndian.AppendUint32(b, uint32(epoch))
	b = binary.LittleEndian.AppendUint64(b, uint64(step))
	b = binary.LittleEndian.AppendUint64(b, uint64((step+1)*int64(c.BatchSize)))
	return binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b)), nil
}

// LocalToken is a decoded LocalCommitter token.
type LocalToken struct {
	Job    string
	Rank   int
	Epoch  int
	Step   int64
	Offset int64 // stream position after Step: (Step+1)*BatchSize
}

// DecodeLocalToken parses a LocalCommitter token.
func DecodeLocalToken(tok []byte) (LocalToken, error) {
	bad := func(why string) (LocalToken, error) { return LocalToken{}, fmt.Errorf("%w: %s", feed.ErrBadToken, why) }
	if len(tok) < 4+1+2+4+4+8+8+4 || !bytes.HasPrefix(tok, []byte(tokenMagic)) {
		return bad("not a longshore standalone token")
	}
	body, sum := tok[:len(tok)-4], binary.LittleEndian.Uint32(tok[len(tok)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return bad("checksum mismatch (damaged)")
	}
	if body[4] != tokenVersion {
		return bad(fmt.Sprintf("token version %d", body[4]))
	}
	jl := int(binary.LittleEndian.Uint16(body[5:7]))
	if len(body) != 7+jl+24 {
		return bad("wrong length")
	}
	rest := body[7+jl:]
	t := LocalToken{
		Job:    string(body[7 : 7+jl]),
		Rank:   int(binary.LittleEndian.Uint32(rest[0:4])),
		Epoch:  int(binary.LittleEndian.Uint32(rest[4:8])),
		Step:   int64(binary.LittleEndian.Uint64(rest[8:16])),
		Offset: int64(binary.LittleEndian.Uint64(rest[16:24])),
	}
	if t.Epoch < 0 || t.Step < 0 || t.Rank < 0 || t.Epoch > 1<<30 {
		return bad("out of range")
	}
	return t, nil
}

// Resume checks the token is this job's and rank's.
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
	return t.Epoch, t.Step, nil
}
