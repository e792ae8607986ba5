package storage

// Sample is one entry of a dataset: an object key relative to the store's
// root and its class label.
//
// A packed sample lives inside a bigger object (a member of a tar shard):
// Object names that object and [Offset, Offset+Size) is the sample's byte
// range in it. Key is then only the sample's unique id, used in logs, sinks
// and accounting; by convention "<tar key>/<member name>". PackedStore
// serves a packed sample's bytes under its Key. A sample with an empty
// Object is its own object, Key, and Offset and Size are zero.
type Sample struct {
	Key   string
	Label int32

	Object string // the containing object's key; "" for a plain sample
	Offset int64  // first byte of the sample in Object
	Size   int64  // bytes (0: an empty member, a sample that fails to decode)
}

// Packed reports whether the sample lives inside another object.
func (s Sample) Packed() bool { return s.Object != "" }

// Dataset is what discovery found: the samples in a fixed, documented order
// (sorted by key for ImageFolder; file order for a manifest), which is the
// index space [0, N) that epochs permute.
type Dataset struct {
	// Classes are the label names; Label i names Classes[i]. For ImageFolder
	// they are the sorted class directory names, as torchvision does.
	Classes []string
	Samples []Sample
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
