package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
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

// human is b rounded for people: 1.5 GiB, 27 MiB, 80 GiB.
func (b byteSize) human() string {
	v, units := float64(b), []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for ; v >= 1024 && i < len(units)-1; i++ {
		v /= 1024
	}
	if v < 10 && v != float64(int64(v)) {
		return fmt.Sprintf("%.1f %s", v, units[i])
	}
	return fmt.Sprintf("%.0f %s", v, units[i])
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

// packCache is --pack-cache: a size, or auto (the default; packPlan
// decides what it means for the dataset's store).
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
