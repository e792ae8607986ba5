package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/longshore/longshore/storage"
)

// byteSize is a flag value in bytes written with an optional unit:
// 268435456, 256MiB, 1.5GiB, 500MB (KiB/MiB/GiB/TiB are powers of 1024,
// kB/MB/GB/TB of 1000; case does not matter).
type byteSize int64

var byteUnits = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"b", 1},
}

func (b *byteSize) Set(s string) error {
	v, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b = byteSize(v)
	return nil
}

func (b byteSize) String() string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b != 0 && int64(b)%u.mult == 0 {
			return fmt.Sprintf("%d%s", int64(b)/u.mult, u.suffix)
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

func parseByteSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsNaN(v) || v*mult >= math.MaxInt64 {
		return 0, fmt.Errorf("%q: want a size in bytes like 268435456, 256MiB or 1GiB", s)
	}
	return int64(v * mult), nil
}

// packCache is --pack-cache: a size, or auto (the default): no chunks
// when the dataset's directory is on a local disk (storage.ReadsInPlace:
// a member is one pread from the page cache, and a chunk would only copy
// it twice, or to another file and back) unless --pack-spill asks for
// them, and storage.DefaultPackedConfig's cache on a network.
type packCache struct {
	size byteSize
	auto bool
}

func (p *packCache) Set(s string) error {
	if strings.EqualFold(strings.TrimSpace(s), "auto") {
		*p = packCache{auto: true}
		return nil
	}
	p.auto = false
	return p.size.Set(s)
}

func (p packCache) String() string {
	if p.auto {
		return "auto"
	}
	return p.size.String()
}

// bytes is the cache for a packed dataset in store s (spill: --pack-spill).
func (p packCache) bytes(s storage.Store, spill string) int64 {
	switch {
	case !p.auto:
		return int64(p.size)
	case spill == "" && storage.ReadsInPlace(s):
		return 0
	default:
		return storage.DefaultPackedConfig().CacheBytes
	}
}
