package mixing

import "testing"

func TestStream(t *testing.T) {
	labels := []int32{0, 0, 1, 2, 3, 3, 3, 3, 9}
	s := Stream(labels, 4)
	// Batches {0,0,1,2}: 3 distinct, most 2; {3,3,3,3}: 1, most 4; the
	// last, short, is dropped.
	if s.Batches != 2 || s.Distinct() != 2 || s.MaxCount() != 3 {
		t.Errorf("Stream = %v, want 2 batches, 2 distinct, most 3", s)
	}
	all := s.Add(Stream([]int32{5, 6, 7, 8}, 4))
	if all.Batches != 3 || all.Distinct() != 8.0/3 || all.MaxCount() != 7.0/3 {
		t.Errorf("Add = %v", all)
	}
	if !all.Within(s, 0) || s.Within(Stream([]int32{1, 2, 3, 4}, 4), 0.1) {
		t.Error("Within compares mean distinct classes")
	}
	if (Stats{}).Distinct() != 0 || (Stats{}).MaxCount() != 0 {
		t.Error("no batches: zero figures")
	}
}
