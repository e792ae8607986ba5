package s3

import (
	"reflect"
	"testing"
	"time"
)

// TestStatsAdd: Add sums every field (a field added to Stats and not to
// Add fails here), and a store without a rate limit leaves the sum
// without one.
func TestStatsAdd(t *testing.T) {
	var one Stats
	var set func(v reflect.Value)
	set = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Struct:
			for i := range v.NumField() {
				set(v.Field(i))
			}
		case reflect.Int64:
			v.SetInt(1)
		case reflect.Float64:
			v.SetFloat(1)
		default:
			t.Fatalf("a field of kind %s: teach Add and this test", v.Kind())
		}
	}
	set(reflect.ValueOf(&one).Elem())
	sum := one.Add(one)
	var check func(path string, v reflect.Value)
	check = func(path string, v reflect.Value) {
		switch v.Kind() {
		case reflect.Struct:
			for i := range v.NumField() {
				check(path+"."+v.Type().Field(i).Name, v.Field(i))
			}
		case reflect.Int64:
			if v.Int() != 2 {
				t.Errorf("%s: 1 + 1 = %d", path, v.Int())
			}
		case reflect.Float64:
			if v.Float() != 2 {
				t.Errorf("%s: 1 + 1 = %v", path, v.Float())
			}
		}
	}
	check("Stats", reflect.ValueOf(sum))
	limited := Stats{Rate: 40, RateLow: 20, Ceiling: 50, Budget: 30, Backoff: time.Second}
	got := limited.Add(Stats{Budget: 10, Backoff: time.Second})
	if got.Rate != 0 || got.RateLow != 0 || got.Ceiling != 0 {
		t.Errorf("a limited store and one without a limit: rate %v, low %v, ceiling %v; want 0 (none)", got.Rate, got.RateLow, got.Ceiling)
	}
	if got.Budget != 40 || got.Backoff != 2*time.Second {
		t.Errorf("budget %v, backoff %v; want 40, 2s", got.Budget, got.Backoff)
	}
}
