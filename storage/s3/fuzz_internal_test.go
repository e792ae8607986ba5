package s3

import (
	"testing"
	"time"
)

// FuzzContentRange checks a ranged answer's Content-Range and
// Content-Length against arbitrary requests: no input may panic, and an
// answer accepted is for the range asked (start at off; for a bounded
// range, its length or a clip at the object's end) with the length the
// store then reads (-1, to the end, only when the end was asked for).
func FuzzContentRange(f *testing.F) {
	f.Add(int64(10), int64(5), "bytes 10-14/100", int64(5))
	f.Add(int64(10), int64(-1), "bytes 10-99/100", int64(90))
	f.Add(int64(95), int64(10), "bytes 95-99/100", int64(5))
	f.Add(int64(0), int64(8), "", int64(100))
	f.Add(int64(10), int64(5), "bytes 11-15/100", int64(5))
	f.Add(int64(10), int64(5), "bytes 10-14/*", int64(5))
	f.Fuzz(func(t *testing.T, off, length int64, contentRange string, size int64) {
		if off < 0 || length == 0 {
			return // GetRange answers these without a request
		}
		r := byteRange{off: off, length: length}
		n, err := r.check(contentRange, size)
		if err != nil {
			return
		}
		if n < -1 || (length > 0 && (n < 0 || n > length)) {
			t.Fatalf("check(%+v, %q, %d) = %d: more than asked", r, contentRange, size, n)
		}
		if contentRange == "" && off != 0 {
			t.Fatalf("a whole-object answer accepted for a range from %d", off)
		}
	})
}

// FuzzRetryAfter: any header value is a wait of 0 up to a day.
func FuzzRetryAfter(f *testing.F) {
	for _, v := range []string{"1", "120", "-3", "Wed, 21 Oct 2015 07:28:00 GMT", "soon", "99999999999999999999"} {
		f.Add(v)
	}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		if d := parseRetryAfter(v, now); d < 0 || d > 24*time.Hour {
			t.Fatalf("Retry-After %q: %v", v, d)
		}
	})
}
