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
	// Fields are the samples' fields (Fields.Len() == len(Samples)); nil
	// when the dataset has none.
	Fields *Fields
	// Excluded is how many samples discovery left out
	// (DiscoverOptions.Exclude).
	Excluded int
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
