// Package dataset is what a store's objects mean to longshore: the
// samples of a dataset (Dataset, Sample), how they are found (Discover:
// an ImageFolder or a manifest), catalogs that give samples by index
// (in memory, or an IndexedManifest reading pieces of a huge manifest),
// the dataset's digest and exclusions, and the packed format (samples
// inside tar shards, read a chunk at a time by PackedStore). It sits on
// the store seam (package storage) and knows no actors, no cluster and
// no object store client: storage/stores opens the store, dataset.Open
// finds the dataset in it.
//
// # Who calls it
//
// The binaries call Open at start. The coordinator needs only a
// dataset's count, digest and layout (from a manifest's index when there
// is one); the node's fetchers read samples through the store Open
// returns (a PackedStore for a packed dataset) and its catalog.
//
// # Errors
//
// ErrEmptyDataset, ErrBadManifest, ErrBadTar, ErrStaleIndex, ErrBadIndex
// and ErrSpillDir, wrapped with the dataset and object; the store's own
// (storage.ErrNotFound, storage.ErrAccess) pass through: test them with
// errors.Is.
//
// # Discovery
//
// Discover reads a dataset with a Format (format.go): ImageFolder, a
// manifest (CSV or JSON lines, whose samples may be tar members), or
// Parquet files (parquet.go, docs/parquet.md), named by
// DiscoverOptions.Format or detected at the root in the order of the
// formats list; a new format is a file and a line there. A Parquet
// dataset's samples are packed: each one's range is its row group's
// media column chunk, which Dataset.Unpacker decodes, and PackedStore
// reads a block's rows of one row group with one ranged GET.
//
// Discover reads an ImageFolder (<root>/<class>/<file>, classes labelled by
// sorted name as torchvision does, samples sorted by key) or a manifest
// (manifest.csv "key,label" or manifest.jsonl {"key","label"}). For S3 it
// lists class prefixes with a delimiter (PrefixLister) and then the
// classes concurrently, instead of paging through every key of the dataset
// in one sequential listing. A manifest is read in ranges of 8 MiB and
// parsed straight into the Dataset, without a copy of its text or a row
// per line: every process parses it, and its peak is little above what
// the Dataset keeps (about 80 bytes a sample for ImageNet-like keys).
//
// # Manifest indexes
//
// A manifest index (ManifestIndex, IndexKey: beside the manifest) holds a
// manifest's count, layout, classes and digest and the offset and
// checksum of every K-th sample's piece; ScanManifest makes one streaming
// the manifest, WriteManifestIndex puts it. A Catalog gives samples by
// index: DatasetCatalog from memory, IndexedManifest reading only the
// pieces asked for into a bounded cache (a stale index: ErrStaleIndex),
// and NewCatalogPackedStore reads a packed Catalog's samples in chunks
// as NewPackedStore does a Dataset's. The
// cluster node reads a big manifest this way (docs/scale.md).
//
// # Fields
//
// A sample may carry named, typed fields beside its media and label
// (Dataset.Fields, by column; a Schema per dataset): a JSON-lines
// manifest's other members, a WebDataset sample's other members
// (WebDatasetMemberFields). Catalogs give them by sample index
// (FieldCatalog, CatalogFields); the digest covers them only where a
// sample has any. docs/fields.md maps each source to its fields.
//
// # Packed datasets
//
// A manifest may place samples inside bigger objects — members of tar
// shards, as longshore-pack writes them or WebDataset publishes them —
// with "object", "offset" and "size" beside the key (Dataset.ObjectOf,
// Sample.Offset, Size). WriteTarShard writes such a tar and returns its members'
// byte ranges, WriteManifestJSONL the manifest; IndexTar lists the
// members of any tar with their exact byte ranges. PackedStore wraps the
// dataset's store and serves a packed sample's bytes under its key,
// reading a chunk of samples (those of one epoch-order block that share a
// shard) with one ranged GET into a cache bounded in bytes.
// docs/packed-datasets.md describes the format and how to choose shard
// and block sizes.
package dataset
