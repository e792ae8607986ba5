//go:build !(cuda && cgo)

package main

import (
	"github.com/longshore/longshore/actors/nvdecode"
	"github.com/longshore/longshore/gpu"
)

// newDecodeService: a build without CUDA has no GPU decoders.
func newDecodeService(int) (*nvdecode.Service, error) { return nil, gpu.ErrNoCUDA }

// newDecodeDevice: a build without CUDA has no GPU decoders.
func newDecodeDevice(int) (*nvdecode.Device, error) { return nil, gpu.ErrNoCUDA }
