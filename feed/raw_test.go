package feed

import "testing"

// A raw batch's rows are views of its bytes; lengths that do not fit the
// rows, or a shape that is not [N, R], are refused.
func TestRawRows(t *testing.T) {
	img := make([]byte, 3*12)
	copy(img[RawHeader:], "abcd")
	copy(img[12+RawHeader:], "")
	copy(img[24+RawHeader:], "wxyz")
	rows, err := rawRows(img, []int{3, 12}, []int64{4, 0, 2})
	if err != nil || string(rows[0]) != "abcd" || len(rows[1]) != 0 || string(rows[2]) != "wx" {
		t.Fatalf("rows %q, %v", rows, err)
	}
	rows[0][0] = 'A' // a view, no copy
	if img[RawHeader] != 'A' || cap(rows[0]) != 4 {
		t.Fatal("a raw row is not a capped view of the batch")
	}
	for _, bad := range []struct {
		shape   []int
		lengths []int64
	}{
		{[]int{3, 12}, []int64{4, 5, 2}},   // over the row
		{[]int{3, 12}, []int64{4, -1, 2}},  // negative
		{[]int{3, 12}, []int64{4, 0}},      // rows and lengths differ
		{[]int{3, 4}, []int64{0, 0, 0}},    // rows smaller than the header
		{[]int{3, 3, 4}, []int64{0, 0, 0}}, // not [N, R]
		{[]int{2, 12}, []int64{0, 0}},      // not the batch's bytes
	} {
		if _, err := rawRows(img, bad.shape, bad.lengths); err == nil {
			t.Errorf("shape %v lengths %v: accepted", bad.shape, bad.lengths)
		}
	}
	if rows, err := rawRows(nil, []int{0, 12}, nil); err != nil || rows != nil {
		t.Fatalf("an empty batch: %v %v", rows, err)
	}
}
