package actors

import (
	"context"
	"errors"
	"testing"

	"github.com/longshore/longshore/dataset"
)

// failingCatalog is a catalog whose lookups fail (a lazy index whose
// store is down).
type failingCatalog struct{ dataset.Catalog }

var errDown = errors.New("store down")

func (failingCatalog) Sample(context.Context, int64) (dataset.Sample, string, error) {
	return dataset.Sample{}, "", errDown
}

// TestItemAt: the one index-to-item lookup (the standalone feeder's and
// the cluster node actor's) gives the sample's key and label at the
// position, keeps the pad mark, and names the index when the catalog
// cannot be read.
func TestItemAt(t *testing.T) {
	ds := &dataset.Dataset{Classes: []string{"a", "b"}, Samples: []dataset.Sample{{Key: "a/0", Label: 0}, {Key: "b/1", Label: 1}}}
	it, err := ItemAt(context.Background(), dataset.DatasetCatalog(ds), 7, 1, true)
	if err != nil || it != (Item{Pos: 7, Index: 1, Key: "b/1", Label: 1, Pad: true}) {
		t.Fatalf("item: %+v, %v", it, err)
	}
	_, err = ItemAt(context.Background(), failingCatalog{dataset.DatasetCatalog(ds)}, 0, 1, false)
	if !errors.Is(err, errDown) || err.Error() != "dataset: sample 1: store down" {
		t.Fatalf("a catalog that cannot be read: %v", err)
	}
}
