package gpu

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// HostMode is how a slot's host memory reaches the device.
type HostMode uint8

// Host modes, strongest first. The zero value is HostRegister.
const (
	// HostRegister page-locks the pool's memory in place
	// (cuMemHostRegister): the very shared memory a trainer maps is what
	// the DMA engine reads, with no staging copy.
	HostRegister HostMode = iota
	// HostStaged copies each batch into a page-locked bounce buffer of the
	// uploader's (cuMemHostAlloc) and DMAs from there: one host memcpy per
	// batch, the copy still asynchronous. For memory that cannot be
	// registered (a locked-memory limit, a file system that refuses).
	HostStaged
	// HostPageable copies straight from pageable memory: the driver stages
	// it through its own buffer and the copy is synchronous in effect.
	HostPageable
	numHostModes
)

var hostModeNames = [numHostModes]string{"register", "staged", "pageable"}

func (m HostMode) String() string {
	if m < numHostModes {
		return hostModeNames[m]
	}
	return fmt.Sprintf("HostMode(%d)", uint8(m))
}

// ParseHostMode parses "register", "staged" or "pageable".
func ParseHostMode(s string) (HostMode, error) {
	for i, n := range hostModeNames {
		if s == n {
			return HostMode(i), nil
		}
	}
	return 0, fmt.Errorf("gpu: host mode %q: want register, staged or pageable", s)
}

// hostModes is the order in which an uploader tries host modes: want,
// then each weaker one unless fallback is off.
func hostModes(want HostMode, fallback bool) []HostMode {
	if !fallback {
		return []HostMode{want}
	}
	var out []HostMode
	for m := want; m < numHostModes; m++ {
		out = append(out, m)
	}
	return out
}

// Fallback is a weaker path taken than the one asked for, with why.
type Fallback struct {
	From   HostMode `json:"from"`
	To     HostMode `json:"to"`
	Reason string   `json:"reason"`
}

// MarshalText names the mode.
func (m HostMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// DevicePlan says which device each rank of a node uses.
type DevicePlan struct {
	// Ranks is how many ranks the node serves.
	Ranks int
	// Device is each rank's device ordinal; nil: no devices (host
	// delivery only).
	Device []int
}

// ErrBadGPUs is the class of --gpus errors.
var ErrBadGPUs = errors.New("gpu: bad --gpus")

// PlanDevices decides the node's ranks and their devices from the --gpus
// value spec, the --ranks value (ranksSet: given explicitly) and what the
// driver sees (visible, or visErr: ErrNoCUDA, ErrNoDevice, another
// failure). One rank per device:
//
//	""/"auto"  every visible device, one rank each; none visible (or a
//	           build without CUDA): no devices, --ranks ranks
//	"none"     no devices, --ranks ranks
//	"all"      every visible device; none is an error
//	"0,2"      those ordinals (of the visible devices), in that order
//
// With devices, an explicit --ranks must equal their count.
func PlanDevices(spec string, ranks int, ranksSet bool, visible []DeviceInfo, visErr error) (DevicePlan, error) {
	none := DevicePlan{Ranks: ranks}
	var want []int
	switch spec = strings.TrimSpace(spec); spec {
	case "none":
		return none, nil
	case "", "auto":
		if visErr != nil || len(visible) == 0 {
			return none, nil
		}
		for _, d := range visible {
			want = append(want, d.Ordinal)
		}
		if ranksSet && ranks != len(want) {
			// auto defers to an explicit --ranks that does not match:
			// the operator chose the rank count.
			return none, nil
		}
	case "all":
		if visErr != nil {
			return none, fmt.Errorf("%w all: %w", ErrBadGPUs, visErr)
		}
		if len(visible) == 0 {
			return none, fmt.Errorf("%w all: %w", ErrBadGPUs, ErrNoDevice)
		}
		for _, d := range visible {
			want = append(want, d.Ordinal)
		}
	default:
		for _, f := range strings.Split(spec, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 0 {
				return none, fmt.Errorf("%w %q: want auto, none, all or a list of device ordinals like 0,1", ErrBadGPUs, spec)
			}
			if slices.Contains(want, n) {
				return none, fmt.Errorf("%w %q: device %d twice (one rank per device)", ErrBadGPUs, spec, n)
			}
			want = append(want, n)
		}
		if visErr != nil {
			return none, fmt.Errorf("%w %q: %w", ErrBadGPUs, spec, visErr)
		}
		for _, n := range want {
			if !slices.ContainsFunc(visible, func(d DeviceInfo) bool { return d.Ordinal == n }) {
				return none, fmt.Errorf("%w %q: device %d is not visible (%d visible; see CUDA_VISIBLE_DEVICES)", ErrBadGPUs, spec, n, len(visible))
			}
		}
	}
	if ranksSet && ranks != len(want) {
		return none, fmt.Errorf("%w %q: %d devices but --ranks %d: one rank per device (drop --ranks, or list %d devices)", ErrBadGPUs, spec, len(want), ranks, ranks)
	}
	return DevicePlan{Ranks: len(want), Device: want}, nil
}
