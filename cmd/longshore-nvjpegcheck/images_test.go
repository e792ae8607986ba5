package main

import (
	"reflect"
	"testing"
)

func TestSpreadTakesEveryKindInTurn(t *testing.T) {
	var imgs []image
	for i, k := range []string{"a", "a", "a", "b", "a", "c", "b"} {
		imgs = append(imgs, image{name: string(rune('0' + i)), kind: k})
	}
	names := func(in []image) (out []string) {
		for _, im := range in {
			out = append(out, im.name+im.kind)
		}
		return out
	}
	for _, tc := range []struct {
		n    int
		want []string
	}{
		{0, nil},
		{2, []string{"0a", "3b"}},
		{5, []string{"0a", "3b", "5c", "1a", "6b"}},
		{99, []string{"0a", "3b", "5c", "1a", "6b", "2a", "4a"}}, // all, none twice
	} {
		if got := names(spread(imgs, tc.n)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("spread(n=%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}
