//go:build !(cuda && cgo)

package main

import (
	"fmt"
	"os"

	"github.com/longshore/longshore/cmd/internal/version"
)

func main() {
	version.Exit("longshore-nvjpegcheck")
	fmt.Fprintln(os.Stderr, "longshore-nvjpegcheck: built without CUDA: build it with -tags cuda (make gpu-check-bundle GPU_BUNDLE_NODE=1)")
	os.Exit(2)
}
