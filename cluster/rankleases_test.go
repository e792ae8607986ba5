package cluster

import (
	"reflect"
	"testing"
)

func TestRankLeases(t *testing.T) {
	s := Fence{1, 1}
	r := NewRankLeases(RankSession{Rank: "a/0", Session: s, FirstEpoch: 0}, 2)
	l0 := Lease{Rank: "a/0", Session: s, Fence: Fence{1, 2}, Epoch: 0, Index: 0, Start: 10, End: 14}
	l1 := Lease{Rank: "a/0", Session: s, Fence: Fence{1, 3}, Epoch: 0, Index: 1, Start: 20, End: 24}
	l2 := Lease{Rank: "a/0", Session: s, Fence: Fence{1, 5}, Epoch: 0, Index: 2, Start: 30, End: 33}

	// Grants arrive out of order; a revoke overtakes its grant; one
	// message is for another session and must be ignored.
	r.Grant(l1)
	if _, ok := r.Take(); ok {
		t.Fatal("took from lease 1 before lease 0 arrived")
	}
	r.Revoke(Revoke{Rank: "a/0", Session: s, Lease: l2.Fence, From: 31})
	r.Grant(Lease{Rank: "a/0", Session: Fence{1, 99}, Fence: Fence{1, 4}, Epoch: 0, Index: 0, Start: 0, End: 5})
	r.Grant(l0)
	r.Grant(l0) // duplicate
	r.Grant(l2)
	if got := r.Messages(); !reflect.DeepEqual(got, []Event{LeaseDone{Rank: "a/0", Session: s, Lease: l2.Fence, Through: 31}}) {
		t.Fatalf("early revoke answered with %+v", got)
	}
	var pos []int64
	for {
		p, ok := r.Take()
		if !ok {
			break
		}
		if p.Offset != int64(len(pos)) {
			t.Fatalf("position %+v at offset %d", p, len(pos))
		}
		pos = append(pos, p.Pos)
		if len(pos) == 6 {
			// Revoke lease 1 while it is being taken: it stops where it got.
			r.Revoke(Revoke{Rank: "a/0", Session: s, Lease: l1.Fence, From: 21})
		}
	}
	if want := []int64{10, 11, 12, 13, 20, 21, 30}; !reflect.DeepEqual(pos, want) {
		t.Fatalf("took %v, want %v", pos, want)
	}
	done := r.Messages()
	want := []Event{
		LeaseDone{Rank: "a/0", Session: s, Lease: l0.Fence, Through: 14},
		LeaseDone{Rank: "a/0", Session: s, Lease: l1.Fence, Through: 22},
	}
	if !reflect.DeepEqual(done, want) {
		t.Fatalf("messages %+v, want %+v", done, want)
	}
	// A commit through offset 6 ends in lease 1 at position 22; it says
	// where the session's runs were cut.
	if err := r.Commit(0, 6, 1, []int64{4}); err != nil {
		t.Fatal(err)
	}
	if got := r.Messages(); !reflect.DeepEqual(got, []Event{Commit{Rank: "a/0", Session: s, Epoch: 0, Lease: l1.Fence, Through: 22, Offset: 6, Step: 1,
		Cuts: []int64{4}, CutsTold: true}}) {
		t.Fatalf("commit %+v", got)
	}
	if err := r.Commit(0, 8, 2, nil); err == nil {
		t.Error("commit beyond what was taken accepted")
	}
	// A StreamEnd from before the revokes does not end the stream; the
	// current one does, a late duplicate of the old one changes nothing,
	// and the rank moves on.
	r.End(StreamEnd{Rank: "a/0", Session: s, Epoch: 0, Length: 11, Leases: 3, Fence: Fence{1, 6}})
	if r.Ended(0) {
		t.Fatal("ended on a stale StreamEnd")
	}
	r.End(StreamEnd{Rank: "a/0", Session: s, Epoch: 0, Length: 7, Leases: 3, Fence: Fence{1, 8}})
	r.End(StreamEnd{Rank: "a/0", Session: s, Epoch: 0, Length: 11, Leases: 3, Fence: Fence{1, 6}})
	if !r.Ended(0) {
		t.Fatal("not ended")
	}
	if !r.Request(4, false) || r.Epoch() != 1 {
		t.Fatalf("did not move on to epoch 1: epoch %d", r.Epoch())
	}
	if got := r.Messages(); !reflect.DeepEqual(got, []Event{Request{Rank: "a/0", Session: s, Epoch: 1, Through: 4}}) {
		t.Fatalf("request %+v", got)
	}
}

// TestRankLeasesTakeFrom: TakeFrom takes from one epoch's stream even
// when an older epoch's stream holds positions (which Take would give
// first), and each stream keeps its own order and offsets.
func TestRankLeasesTakeFrom(t *testing.T) {
	s := Fence{1, 1}
	r := NewRankLeases(RankSession{Rank: "a/0", Session: s, FirstEpoch: 0}, 2)
	r.Grant(Lease{Rank: "a/0", Session: s, Fence: Fence{1, 2}, Epoch: 0, Index: 0, Start: 0, End: 2})
	r.Grant(Lease{Rank: "a/0", Session: s, Fence: Fence{1, 3}, Epoch: 1, Index: 0, Start: 5, End: 8})
	if p, ok := r.TakeFrom(1); !ok || p.Epoch != 1 || p.Pos != 5 || p.Offset != 0 {
		t.Fatalf("TakeFrom(1) = %+v, %v", p, ok)
	}
	if p, ok := r.Take(); !ok || p.Epoch != 0 || p.Pos != 0 || p.Offset != 0 {
		t.Fatalf("Take after TakeFrom(1) = %+v, %v: want epoch 0's first", p, ok)
	}
	if p, ok := r.TakeFrom(1); !ok || p.Pos != 6 || p.Offset != 1 {
		t.Fatalf("second TakeFrom(1) = %+v, %v", p, ok)
	}
	if _, ok := r.TakeFrom(2); ok {
		t.Fatal("TakeFrom of an epoch without a stream gave a position")
	}
	r.TakeFrom(1)
	if p, ok := r.TakeFrom(1); ok {
		t.Fatalf("TakeFrom(1) past its leases = %+v", p)
	}
}
