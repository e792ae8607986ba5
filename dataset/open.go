package dataset

import (
	"context"
	"fmt"

	"github.com/longshore/longshore/storage"
)

// Open discovers the dataset in s, a store the caller opened at raw
// (storage/stores.Open; raw names it in errors): what every binary does
// at start. When packed is not nil and the dataset is packed
// (Dataset.Packed), the store returned is a PackedStore configured by
// *packed over s, so that Get serves samples by key either way; nil
// packed never wraps, for a caller that needs only the sample list.
//
// The caller closes the store returned, if it is an io.Closer (a
// PackedStore closes the store it wraps). On error s is closed. Errors
// name the dataset, "dataset <raw>: ...", and wrap those of
// PackedConfig.Validate (checked before any I/O) and Discover:
// errors.Is works with ErrEmptyDataset, ErrBadManifest and the store's
// storage.ErrNotFound and storage.ErrAccess.
func Open(ctx context.Context, s storage.Store, raw string, dopts DiscoverOptions, packed *PackedConfig) (storage.Store, *Dataset, error) {
	if packed != nil {
		if err := packed.Validate(); err != nil {
			storage.Close(s)
			return nil, nil, fmt.Errorf("dataset %s: %w", raw, err)
		}
	}
	ds, err := Discover(ctx, s, dopts)
	if err != nil {
		storage.Close(s)
		return nil, nil, fmt.Errorf("dataset %s: %w", raw, err)
	}
	if packed == nil || !ds.Packed() {
		return s, ds, nil
	}
	ps, err := NewPackedStore(s, ds, *packed)
	if err != nil {
		storage.Close(s)
		return nil, nil, fmt.Errorf("dataset %s: %w", raw, err)
	}
	return ps, ds, nil
}
