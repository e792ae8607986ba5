//go:build !(cuda && cgo)

package gpu

// CUDABuilt reports whether this binary was built with CUDA (the `cuda`
// build tag, with cgo).
const CUDABuilt = false

// DefaultDriver is NoDriver in a build without CUDA: every device call
// returns ErrNoCUDA.
func DefaultDriver() Driver { return NoDriver{} }
