package journal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/storage"
)

// Lineage archives. A generation holds the trails (cluster.Trail: what
// each rank session committed) of the open epochs and of the epoch that
// completed last; once an epoch has completed, Write copies its trails
// to an object of their own, written after the generation that holds
// them (so it never holds a commit that is not durable) and rewritten
// whenever the epoch completes again (a life resumed from an older
// token):
//
//	<root>/lineage/<job id, 16 hex digits>/epoch-<10 digits>
//
// magic "LSL", version 2, the job id (8 bytes little-endian), the epoch
// and the generation it was copied from (uvarints), the trails as a
// generation encodes them (version 1, before journal version 6: without
// their cuts; still read), and a CRC-32C of everything before it. A
// write that fails is retried before the next generation is written
// (Write fails if it still cannot be made), so the epoch's trails are
// never dropped from the generations before they are archived.
// Trails reads them back.

const archiveMagic = "LSL"

func archiveKey(job uint64, epoch int) string {
	return fmt.Sprintf("lineage/%016x/epoch-%010d", job, epoch)
}

// archive is one epoch's trails waiting to be written.
type archive struct {
	epoch int
	key   string
	b     []byte
}

// archiveVersion is the archives' version: 2 with cuts, 1 without.
const archiveVersion = 2

func encodeArchive(job uint64, epoch int, gen uint64, batch int, ts []cluster.Trail) []byte {
	return encodeArchiveVersion(job, epoch, gen, batch, ts, archiveVersion)
}

// encodeArchiveVersion encodes an archive as version v wrote it.
func encodeArchiveVersion(job uint64, epoch int, gen uint64, batch int, ts []cluster.Trail, v byte) []byte {
	b := append([]byte(archiveMagic), v)
	b = binary.LittleEndian.AppendUint64(b, job)
	b = binary.AppendUvarint(b, uint64(epoch))
	b = binary.AppendUvarint(b, gen)
	b = appendTrails(b, ts, int64(batch), v >= 2)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeArchive(b []byte) (job uint64, epoch int, gen uint64, ts []cluster.Trail, err error) {
	if len(b) < len(archiveMagic)+1+4 || string(b[:len(archiveMagic)]) != archiveMagic || b[len(archiveMagic)] < 1 || b[len(archiveMagic)] > archiveVersion {
		return 0, 0, 0, nil, fmt.Errorf("%w: not a lineage archive of version 1 to %d (%d bytes)", ErrCorrupt, archiveVersion, len(b))
	}
	v := b[len(archiveMagic)]
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return 0, 0, 0, nil, fmt.Errorf("%w: lineage archive checksum mismatch", ErrCorrupt)
	}
	d := &decoder{b: body[len(archiveMagic)+1:]}
	job = d.u64("job")
	epoch = d.small("epoch")
	gen = d.uvarint("generation")
	ts = d.trails(v >= 2)
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	return job, epoch, gen, ts, d.err
}

// queueArchives queues the trails of e's complete epochs that carry them
// and this journal has not archived.
func (j *Journal) queueArchives(e Entry) {
	for n, es := range e.State.Epochs {
		if !es.Complete || len(es.Trails) == 0 || j.archived[n] {
			continue
		}
		j.archived[n] = true
		j.pending = append(j.pending, archive{epoch: n, key: archiveKey(e.Job, n),
			b: encodeArchive(e.Job, n, e.Gen, e.BatchSize, es.Trails)})
	}
}

// flushArchives writes the queued archives; it returns the first error
// and keeps what failed queued.
func (j *Journal) flushArchives(ctx context.Context) error {
	var first error
	left := j.pending[:0]
	for _, a := range j.pending {
		var err error
		for attempt := 0; ; attempt++ {
			if _, err = j.cfg.Store.Put(ctx, a.key, a.b, storage.Cond{}); err == nil || ctx.Err() != nil || attempt >= j.cfg.Retries {
				break
			}
			j.backoff(ctx, attempt)
		}
		if err != nil {
			left = append(left, a)
			if first == nil {
				first = fmt.Errorf("journal %s: archive epoch %d's lineage: %w", j.cfg.Store, a.epoch, err)
			}
		}
	}
	j.pending = left
	return first
}

// ErrNoLineage: the journal does not hold what the epoch's rank sessions
// committed (it was written before journals recorded it, or its archive
// is gone).
var ErrNoLineage = errors.New("journal: no lineage recorded for the epoch")

// Trails returns what each rank session committed of epoch, as of
// generation e: its trails in e (an open epoch's so far, or the epoch
// that completed last), else the epoch's archive. An epoch e has not
// started has none.
func (j *Journal) Trails(ctx context.Context, e Entry, epoch int) ([]cluster.Trail, error) {
	if epoch < 0 || epoch >= len(e.State.Epochs) {
		return nil, nil
	}
	es := e.State.Epochs[epoch]
	if !es.Complete || len(es.Trails) > 0 {
		return es.Trails, nil
	}
	key := archiveKey(e.Job, epoch)
	b, err := j.get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, fmt.Errorf("%w: epoch %d is complete in generation %d, and %s/%s does not exist (a journal written before version 5 records no lineage)", ErrNoLineage, epoch, e.Gen, j.cfg.Store, key)
	}
	if err != nil {
		return nil, fmt.Errorf("journal %s: read %s: %w", j.cfg.Store, key, err)
	}
	job, n, gen, ts, err := decodeArchive(b)
	switch {
	case err != nil:
		return nil, fmt.Errorf("journal %s: %s: %w", j.cfg.Store, key, err)
	case job != e.Job || n != epoch || gen > e.Gen:
		return nil, fmt.Errorf("%w: %s/%s is of job %016x epoch %d generation %d, the journal's generation %d is job %016x", ErrCorrupt, j.cfg.Store, key, job, n, gen, e.Gen, e.Job)
	}
	return ts, nil
}
