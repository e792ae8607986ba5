package journal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/longshore/longshore/cluster"
)

// Entry is one generation of the journal.
type Entry struct {
	// Gen is the generation number (the object's key).
	Gen uint64
	// Job identifies the job the journal belongs to; tokens carry it.
	Job uint64
	// Written is when the writer encoded the entry (its clock).
	Written time.Time
	// State is the coordinator's durable state.
	State cluster.State
	// Peers are the gossip addresses of the members the writer knew, so
	// a restarted coordinator can rejoin the cluster without a --join.
	Peers []string
	// Digest, BatchSize and Epochs complete the job's identity (with
	// State's seed, block and window): see Identity. Entries of versions
	// before 4 have none (Digest "").
	Digest    string
	BatchSize int
	Epochs    int
}

// Identity is the job identity e records.
func (e Entry) Identity() Identity {
	return Identity{Digest: e.Digest, Seed: e.State.Seed, Block: e.State.Block, Window: e.State.Window,
		BatchSize: e.BatchSize, Epochs: e.Epochs}
}

const (
	magic = "LSJ"
	// version 2 added the ranks' last commits per epoch, version 3 the
	// order's window after its block, version 4 the rest of the job's
	// identity after the window (dataset digest, batch size, epochs),
	// version 5 each epoch's trails after its commits (cluster.Trail:
	// what each rank session committed, which lineage reads), version 6
	// each trail's cuts after its commits (where its node cut its runs:
	// cluster.Trail.Cuts); entries of versions 1 to 5 are still read
	// (the window of 1 and 2 is 1: the order before windows; 1 to 3 have
	// no digest; 1 to 4 no trails; 5 no cuts, CutsTold false).
	version = 6
	// maxDigest bounds a decoded digest's length.
	maxDigest = 1 << 10
	// maxCount bounds every count in a decoded entry, so a damaged object
	// that passes the checksum by chance (or a hostile one) cannot make
	// Decode allocate without bound.
	maxCount = 1 << 24
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Encode appends e's encoding to dst.
func Encode(dst []byte, e Entry) []byte { return encodeVersion(dst, e, version) }

// encodeVersion encodes e as version v wrote it (4 to 6: the tests'
// older entries are cut from version 4's).
func encodeVersion(dst []byte, e Entry, v byte) []byte {
	start := len(dst)
	b := append(dst, magic...)
	b = append(b, v)
	b = binary.LittleEndian.AppendUint64(b, e.Job)
	b = binary.AppendUvarint(b, e.Gen)
	b = binary.AppendUvarint(b, e.State.Incarnation)
	b = binary.AppendUvarint(b, e.State.Seq)
	b = binary.AppendVarint(b, e.Written.UnixNano())
	b = binary.AppendVarint(b, e.State.Samples)
	b = binary.LittleEndian.AppendUint64(b, e.State.Seed)
	b = binary.AppendUvarint(b, uint64(e.State.Block))
	b = binary.AppendUvarint(b, uint64(e.State.Window))
	b = binary.AppendUvarint(b, uint64(len(e.Digest)))
	b = append(b, e.Digest...)
	b = binary.AppendUvarint(b, uint64(max(e.BatchSize, 0)))
	b = binary.AppendUvarint(b, uint64(max(e.Epochs, 0)))
	b = binary.AppendUvarint(b, uint64(len(e.State.Epochs)))
	for _, ep := range e.State.Epochs {
		var flags byte
		if ep.Complete {
			flags |= 1
		}
		b = append(b, flags)
		b = appendRanges(b, ep.Committed)
		b = appendRanges(b, ep.Dropped)
		b = binary.AppendUvarint(b, uint64(len(ep.Commits)))
		for _, rc := range ep.Commits {
			gen := rc.Gen
			if gen == 0 {
				gen = e.Gen // made durable by this very entry
			}
			b = binary.AppendUvarint(b, uint64(len(rc.Rank)))
			b = append(b, rc.Rank...)
			b = binary.AppendUvarint(b, rc.Session.Incarnation)
			b = binary.AppendUvarint(b, rc.Session.Seq)
			b = binary.AppendVarint(b, rc.Step)
			b = binary.AppendVarint(b, rc.Offset)
			b = binary.AppendUvarint(b, gen)
		}
		if v >= 5 {
			b = appendTrails(b, ep.Trails, int64(e.BatchSize), v >= 6)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(e.Peers)))
	for _, p := range e.Peers {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// appendRanges writes sorted ranges as (gap from the previous end, length)
// pairs: small numbers, so a few bytes a range.
func appendRanges(b []byte, rs []cluster.Range) []byte {
	b = binary.AppendUvarint(b, uint64(len(rs)))
	var prev int64
	for _, r := range rs {
		b = binary.AppendVarint(b, r.Start-prev)
		b = binary.AppendVarint(b, r.End-r.Start)
		prev = r.End
	}
	return b
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorrupt, what)
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) u64(what string) uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.fail(what)
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) count(what string) int {
	n := d.uvarint(what)
	if n > maxCount || n > uint64(len(d.b)) {
		d.fail(what + ": count out of range")
		return 0
	}
	return int(n)
}

// small reads a uvarint that must fit a count (maxCount).
func (d *decoder) small(what string) int {
	n := d.uvarint(what)
	if n > maxCount {
		d.fail(what + ": out of range")
		return 0
	}
	return int(n)
}

func (d *decoder) ranges(what string) []cluster.Range {
	n := d.count(what)
	if n == 0 {
		return nil
	}
	out := make([]cluster.Range, 0, n)
	var prev int64
	for range n {
		gap, l := d.varint(what), d.varint(what)
		if d.err != nil {
			return nil
		}
		if gap < 0 || l <= 0 || prev+gap < prev {
			d.fail(what + ": ranges not sorted and disjoint")
			return nil
		}
		r := cluster.Range{Start: prev + gap, End: prev + gap + l}
		out = append(out, r)
		prev = r.End
	}
	return out
}

// Decode parses an encoded entry, checking its checksum first. Every
// failure wraps ErrCorrupt.
func Decode(b []byte) (Entry, error) {
	if len(b) < len(magic)+1+4 || string(b[:len(magic)]) != magic {
		return Entry{}, fmt.Errorf("%w: not a longshore journal entry (%d bytes)", ErrCorrupt, len(b))
	}
	v := b[len(magic)]
	if v < 1 || v > version {
		return Entry{}, fmt.Errorf("%w: entry version %d, this build reads 1 to %d", ErrCorrupt, v, version)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return Entry{}, fmt.Errorf("%w: checksum mismatch (torn or damaged object)", ErrCorrupt)
	}
	d := &decoder{b: body[len(magic)+1:]}
	var e Entry
	e.Job = d.u64("job")
	e.Gen = d.uvarint("generation")
	e.State.Incarnation = d.uvarint("incarnation")
	e.State.Seq = d.uvarint("seq")
	e.Written = time.Unix(0, d.varint("time"))
	e.State.Samples = d.varint("samples")
	e.State.Seed = d.u64("seed")
	e.State.Block = int(d.uvarint("block"))
	e.State.Window = 1
	if v >= 3 {
		e.State.Window = int(d.uvarint("window"))
	}
	if v >= 4 {
		l := d.count("digest")
		if d.err == nil && l > maxDigest {
			d.fail("digest: length out of range")
		}
		if d.err == nil {
			e.Digest = string(d.b[:l])
			d.b = d.b[l:]
		}
		e.BatchSize = d.small("batch size")
		e.Epochs = d.small("epochs")
	}
	n := d.count("epochs")
	for range n {
		if d.err != nil || len(d.b) == 0 {
			d.fail("epoch flags")
			break
		}
		flags := d.b[0]
		d.b = d.b[1:]
		es := cluster.EpochState{Complete: flags&1 != 0}
		es.Committed = d.ranges("committed")
		es.Dropped = d.ranges("dropped")
		if v >= 2 {
			nc := d.count("commits")
			for range nc {
				l := d.count("rank")
				if d.err != nil {
					break
				}
				rc := cluster.RankCommit{Rank: string(d.b[:l]), Epoch: len(e.State.Epochs)}
				d.b = d.b[l:]
				rc.Session.Incarnation = d.uvarint("session")
				rc.Session.Seq = d.uvarint("session")
				rc.Step = d.varint("step")
				rc.Offset = d.varint("offset")
				rc.Gen = d.uvarint("commit generation")
				es.Commits = append(es.Commits, rc)
			}
		}
		if v >= 5 {
			es.Trails = d.trails(v >= 6)
		}
		e.State.Epochs = append(e.State.Epochs, es)
	}
	np := d.count("peers")
	for range np {
		l := d.count("peer")
		if d.err != nil {
			break
		}
		e.Peers = append(e.Peers, string(d.b[:l]))
		d.b = d.b[l:]
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	if d.err != nil {
		return Entry{}, d.err
	}
	return e, nil
}

// appendTrails writes trails: per trail its rank and session, its
// segments as (start less the previous segment's end, length) pairs,
// its stream ends as differences, its commits as (step, offset) less the
// previous commit's, those the others imply for the batch size left out
// (cluster.TrimCommits), and with cuts (version 6 on) its cuts: 0 when
// its node did not tell them (CutsTold false), else their count plus 1
// and each less the one before.
func appendTrails(b []byte, ts []cluster.Trail, batch int64, cuts bool) []byte {
	b = binary.AppendUvarint(b, uint64(len(ts)))
	for _, t := range ts {
		b = binary.AppendUvarint(b, uint64(len(t.Rank)))
		b = append(b, t.Rank...)
		b = binary.AppendUvarint(b, t.Session.Incarnation)
		b = binary.AppendUvarint(b, t.Session.Seq)
		b = binary.AppendUvarint(b, uint64(len(t.Segs)))
		var prev int64
		for _, r := range t.Segs {
			b = binary.AppendVarint(b, r.Start-prev)
			b = binary.AppendVarint(b, r.End-r.Start)
			prev = r.End
		}
		b = binary.AppendUvarint(b, uint64(len(t.Ends)))
		var end int64
		for _, e := range t.Ends {
			b = binary.AppendVarint(b, e-end)
			end = e
		}
		cs := cluster.TrimCommits(t, batch)
		b = binary.AppendUvarint(b, uint64(len(cs)))
		var step, off int64
		for _, c := range cs {
			b = binary.AppendVarint(b, c.Step-step)
			b = binary.AppendVarint(b, c.Offset-off)
			step, off = c.Step, c.Offset
		}
		if !cuts {
			continue
		}
		if !t.CutsTold {
			b = binary.AppendUvarint(b, 0)
			continue
		}
		b = binary.AppendUvarint(b, uint64(len(t.Cuts))+1)
		var cut int64
		for _, x := range t.Cuts {
			b = binary.AppendVarint(b, x-cut)
			cut = x
		}
	}
	return b
}

func (d *decoder) trails(cuts bool) []cluster.Trail {
	n := d.count("trails")
	var out []cluster.Trail
	for range n {
		l := d.count("trail rank")
		if d.err != nil {
			return nil
		}
		t := cluster.Trail{Rank: string(d.b[:l])}
		d.b = d.b[l:]
		t.Session.Incarnation = d.uvarint("trail session")
		t.Session.Seq = d.uvarint("trail session")
		ns := d.count("trail segments")
		var prev int64
		for range ns {
			gap, l := d.varint("trail segment"), d.varint("trail segment")
			if d.err != nil {
				return nil
			}
			if l <= 0 || prev+gap < 0 {
				d.fail("trail segment out of range")
				return nil
			}
			t.Segs = append(t.Segs, cluster.Range{Start: prev + gap, End: prev + gap + l})
			prev += gap + l
		}
		ne := d.count("trail ends")
		var end int64
		for range ne {
			end += d.varint("trail end")
			t.Ends = append(t.Ends, end)
		}
		nc := d.count("trail commits")
		var step, off int64
		for range nc {
			step += d.varint("trail commit")
			off += d.varint("trail commit")
			t.Commits = append(t.Commits, cluster.TrailCommit{Step: step, Offset: off})
		}
		if cuts {
			if nx := d.small("trail cuts"); nx > len(d.b)+1 {
				d.fail("trail cuts: count out of range")
			} else if nx > 0 {
				t.CutsTold = true
				var x int64
				for range nx - 1 {
					x += d.varint("trail cut")
					t.Cuts = append(t.Cuts, x)
				}
			}
		}
		if d.err != nil {
			return nil
		}
		out = append(out, t)
	}
	return out
}
