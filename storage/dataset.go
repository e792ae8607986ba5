package storage

// Sample is one entry of a dataset: an object key relative to the store's
// root and its class label.
type Sample struct {
	Key   string
	Label int32
}

// Dataset is what discovery found: the samples in a fixed, documented order
// (sorted by key for ImageFolder; file order for a manifest), which is the
// index space [0, N) that epochs permute.
type Dataset struct {
	// Classes are the label names; Label i names Classes[i]. For ImageFolder
	// they are the sorted class directory names, as torchvision does.
	Classes []string
	Samples []Sample
}
