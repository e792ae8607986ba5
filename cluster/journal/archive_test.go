package journal

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/storage"
)

// A completed epoch's trails leave the generations once another epoch
// completes; the journal archives them first, and Trails reads them
// from the generation while it holds them and from the archive after.
// A journal that continues from a generation holding them archives them
// too (the life that wrote it may have died before it could), and an
// archive is never read for an epoch the newest generation holds open.
func TestLineageArchive(t *testing.T) {
	ctx := context.Background()
	st := storage.NewMemStore("j")
	j, _ := open(t, quick(st), StartOptions{})
	if err := j.Identify(Identity{Digest: "d", Seed: 1, Block: 1, Window: 1, BatchSize: 2, Epochs: 2}, false); err != nil {
		t.Fatal(err)
	}
	tr := []cluster.Trail{{Rank: "n1/0", Session: cluster.Fence{Incarnation: 1, Seq: 2}, Segs: []cluster.Range{{Start: 0, End: 5}},
		Commits: []cluster.TrailCommit{{Step: 0, Offset: 2}, {Step: 1, Offset: 4}, {Step: 2, Offset: 5}}}}
	// The journal leaves out the commit the others imply (batch size 2:
	// step 1 was a full batch).
	want := []cluster.Trail{tr[0]}
	want[0].Commits = []cluster.TrailCommit{{Step: 0, Offset: 2}, {Step: 2, Offset: 5}}
	open0 := cluster.State{Samples: 5, Seed: 1, Block: 1, Window: 1, Epochs: []cluster.EpochState{{Committed: []cluster.Range{{Start: 0, End: 5}}, Trails: tr}}}
	g, err := j.Write(ctx, open0, nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := j.Load(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := j.Trails(ctx, e, 0); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("open epoch's trails %+v, %v; want %+v", got, err, want)
	}
	if _, err := st.Get(ctx, archiveKey(j.Job(), 0), nil); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("an open epoch was archived: %v", err)
	}
	// Epoch 0 completes: the generation holds its trails, and the archive
	// is written after it.
	done0 := cluster.State{Samples: 5, Seed: 1, Block: 1, Window: 1, Epochs: []cluster.EpochState{{Complete: true, Trails: tr}, {}}}
	if _, err := j.Write(ctx, done0, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, archiveKey(j.Job(), 0), nil); err != nil {
		t.Fatalf("epoch 0 complete, no archive: %v", err)
	}
	// Epoch 1 completes too: epoch 0's trails leave the generation.
	done1 := cluster.State{Samples: 5, Seed: 1, Block: 1, Window: 1, Epochs: []cluster.EpochState{{Complete: true}, {Complete: true}}}
	if g, err = j.Write(ctx, done1, nil); err != nil {
		t.Fatal(err)
	}
	if e, err = j.Load(ctx, g); err != nil {
		t.Fatal(err)
	}
	got, err := j.Trails(ctx, e, 0)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("archived trails %+v, %v; want %+v", got, err, want)
	}
	if _, err := j.Trails(ctx, e, 1); !errors.Is(err, ErrNoLineage) {
		t.Fatalf("epoch 1 (no trails, no archive): %v, want ErrNoLineage", err)
	}

	// A life that died between a generation and its archive: the next
	// life archives at its first write.
	st2 := storage.NewMemStore("j2")
	j2, _ := open(t, quick(st2), StartOptions{})
	if err := j2.Identify(Identity{Digest: "d", Seed: 1, Block: 1, Window: 1, BatchSize: 2, Epochs: 2}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := j2.Write(ctx, done0, nil); err != nil {
		t.Fatal(err)
	}
	if err := st2.Delete(ctx, archiveKey(j2.Job(), 0)); err != nil {
		t.Fatal(err)
	}
	j3, restored := open(t, quick(st2), StartOptions{})
	if restored == nil {
		t.Fatal("nothing restored")
	}
	if g, err = j3.Write(ctx, done1, nil); err != nil {
		t.Fatal(err)
	}
	if e, err = j3.Load(ctx, g); err != nil {
		t.Fatal(err)
	}
	if got, err := j3.Trails(ctx, e, 0); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("trails archived by the next life %+v, %v; want %+v", got, err, want)
	}
}
