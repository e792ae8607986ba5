package dataset

import (
	"fmt"
	"math"
)

// Sample is one entry of a dataset: an object key relative to the store's
// root and its class label.
//
// A packed sample lives inside a bigger object (a member of a tar shard):
// Object names that object in its Dataset's Objects (Dataset.ObjectOf) and
// [Offset, Offset+Size) is the sample's byte range in it. Key is then
// only the sample's unique id, used in logs, sinks and accounting; by
// convention "<tar key>/<member name>". PackedStore serves a packed
// sample's bytes under its Key. A sample whose Object is NoObject (the
// zero value, so Sample{Key: k, Label: l} is one) is its own object, Key,
// and Offset and Size are zero.
//
// A Sample is 40 bytes: a dataset holds one per sample in every process,
// and holding the object's key in each (16 bytes more, even with the
// string shared) is hundreds of MB at ten million samples.
type Sample struct {
	Key    string
	Label  int32
	Object ObjectID // the containing object; NoObject for a plain sample
	Offset int64    // first byte of the sample in Object
	Size   int64    // bytes (0: an empty member, a sample that fails to decode)
}

// Packed reports whether the sample lives inside another object.
func (s Sample) Packed() bool { return s.Object != NoObject }

// ObjectID names an object of a Dataset that holds packed samples: ID i
// is Dataset.Objects[i-1]. The zero ID, NoObject, names none. IDs mean
// something only with their Dataset: a Sample moved to another Dataset
// must have its Object mapped through the objects' keys.
type ObjectID int32

// NoObject is the Object of a plain sample.
const NoObject ObjectID = 0

// MaxObjects bounds the objects of a Dataset (Dataset.Objects), what an
// ObjectID can name.
const MaxObjects = math.MaxInt32

// Dataset is what discovery found: the samples in a fixed, documented order
// (sorted by key for ImageFolder; file order for a manifest), which is the
// index space [0, N) that epochs permute.
type Dataset struct {
	// Classes are the label names; Label i names Classes[i]. For ImageFolder
	// they are the sorted class directory names, as torchvision does.
	Classes []string
	Samples []Sample
	// Objects are the keys of the objects that hold packed samples, each
	// once, in order of first use by Samples (for a parsed manifest):
	// Sample.Object i names Objects[i-1]. Empty when no sample is packed.
	Objects []string
	// Format names the Format discovery read the dataset with
	// (Format.Name: "imagefolder", "manifest-csv", ...); "" for a
	// Dataset made otherwise.
	Format string
	// Fields are the samples' fields (Fields.Len() == len(Samples)); nil
	// when the dataset has none.
	Fields *Fields
	// Excluded is how many samples discovery left out
	// (DiscoverOptions.Exclude).
	Excluded int
	// Unpacker gets the packed samples' bytes out of the bytes of their
	// ranges, for a format whose range is more than a sample (a Parquet
	// row group's column chunk); nil when a packed sample's range is its
	// bytes (a tar member). PackedStore uses it.
	Unpacker Unpacker
	// FormatDigest is what the format adds to the dataset's digest
	// beyond its samples (a Parquet dataset's column schema and the
	// columns read); "" for none.
	FormatDigest string
}

// Unpacker gets packed samples out of the bytes of a range of their
// object, for formats that pack samples into bigger objects in an
// encoded form (Parquet). A Sample's Offset and Size are then the range
// to read for it, which holds other samples too: samples that share a
// range are read once, and Unpack decodes the range once for all of
// them.
type Unpacker interface {
	// Unpack returns the members of data, the bytes [off,
	// off+len(data)) of object: a range that holds the ranges of the
	// samples asked for. It does not decode anything yet.
	Unpack(object string, off int64, data []byte) Members
}

// Members are the samples of a range of an object (Unpacker.Unpack).
// A Members is safe for concurrent use.
type Members interface {
	// Member returns sample s's bytes, decoding the part of the range
	// that holds them (once, for every sample there). The bytes are
	// the caller's to read, not to change; they stay valid after the
	// range's data is gone, until Release. An error wraps the format's
	// (ErrBadParquet).
	Member(s Sample) ([]byte, error)
	// Release says that no bytes Member returned are read any more:
	// the memory they lie in may go back to the decoder's pools, to be
	// reused. A Member after it is a bug of the caller.
	Release()
}

// Object returns the key of the object id names; "" for NoObject. An ID
// outside the dataset's objects is a bug of the caller, and panics.
func (ds *Dataset) Object(id ObjectID) string {
	if id == NoObject {
		return ""
	}
	if id < 0 || int(id) > len(ds.Objects) {
		panic(fmt.Sprintf("dataset: object ID %d outside the dataset's %d objects", id, len(ds.Objects)))
	}
	return ds.Objects[id-1]
}

// ObjectOf returns the key of the object that holds the packed sample s;
// "" for a plain sample.
func (ds *Dataset) ObjectOf(s Sample) string { return ds.Object(s.Object) }

// AddObject appends the object key to Objects and returns its ID, for
// samples that live in it. It does not look for key among the objects
// already there: add each object once, so that its samples share one ID
// (PackedStore reads a chunk per object). It panics past MaxObjects.
func (ds *Dataset) AddObject(key string) ObjectID {
	if len(ds.Objects) >= MaxObjects {
		panic(fmt.Sprintf("dataset: more than %d objects in a dataset", MaxObjects))
	}
	ds.Objects = append(ds.Objects, key)
	return ObjectID(len(ds.Objects))
}

// Packed reports whether any sample of the dataset is packed (see
// Sample), so that reading it needs a PackedStore.
func (ds *Dataset) Packed() bool {
	for _, s := range ds.Samples {
		if s.Packed() {
			return true
		}
	}
	return false
}
