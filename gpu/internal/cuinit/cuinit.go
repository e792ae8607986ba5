//go:build cuda && cgo

package cuinit

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>
static const char *ls_err_name(CUresult r) {
	const char *s = 0;
	if (cuGetErrorName(r, &s) != CUDA_SUCCESS || s == 0) return "CUDA_ERROR_UNKNOWN";
	return s;
}
*/
import "C"

import (
	"os"
	"strconv"

	"github.com/longshore/longshore/internal/buildversion"
)

// Err is the result of cuInit, "" on success.
var Err string

func init() {
	// A lone --version is answered before CUDA is touched: a cuda build
	// says what it is on a host, or in an image, without a driver.
	buildversion.ExitIfAsked("")
	if r := C.cuInit(0); r != C.CUDA_SUCCESS {
		Err = C.GoString(C.ls_err_name(r)) + " " + strconv.Itoa(int(r))
		msg := "longshore: the CUDA driver did not initialize (" + Err + "): "
		switch r {
		case C.CUDA_ERROR_NO_DEVICE:
			msg += "no device visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)"
		case C.CUDA_ERROR_STUB_LIBRARY:
			msg += "this libcuda.so.1 is the toolkit's build stub, not the driver's (in a container: run it with the NVIDIA container runtime, e.g. docker run --gpus all; elsewhere check LD_LIBRARY_PATH)"
		default:
			msg += "check that the NVIDIA driver is loaded (nvidia-smi)"
		}
		msg += "; this binary was built with -tags cuda: on hosts without a GPU run a build without the tag\n"
		os.Stderr.WriteString(msg)
		os.Exit(2)
	}
}
