//go:build cuda && cgo

package main

import "github.com/longshore/longshore/actors/nvdecode"

// newDecodeService starts --decode-device cuda's service on GPU ord.
func newDecodeService(ord int) (*nvdecode.Service, error) {
	return nvdecode.NewService(nvdecode.CUDABackend(ord), 0, 0)
}

// newDecodeDevice starts --decode-device cuda's batch stage device on GPU
// ord.
func newDecodeDevice(ord int) (*nvdecode.Device, error) {
	return nvdecode.NewDevice(nvdecode.CUDAEngine(ord), 0, 0)
}
