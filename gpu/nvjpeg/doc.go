// Package nvjpeg is the design and the first pieces of decoding on the
// GPU's own engines (--decode-device cuda, issue 18): JPEG through nvJPEG
// (libnvjpeg from Debian's non-free CUDA 11.8 packages, through cgo; the
// hardware backend on GPUs that have a JPEG engine: A100, H100, H200).
// Not wired into the node yet.
//
// # What is here
//
//   - Probe (probe.go, plain Go): a JPEG's frame header (SOF marker:
//     process, precision, size, components and their sampling), read
//     without decoding; fuzzed.
//   - Route (route.go, plain Go): the per-sample decision, pure and
//     table-tested: the hardware engine, the GPU's hybrid (CUDA-core)
//     backend, or the CPU path, with a counted reason for every sample
//     that falls back (not a JPEG, progressive on the hardware engine,
//     CMYK, 12-bit, arithmetic coding, too small to be worth a launch,
//     larger than the engine takes).
//   - Decoder (decoder_cuda.go, `cuda && cgo`): an nvJPEG handle and state
//     for one device, single-image decode into device memory. A skeleton
//     that make cuda-check compiles and links against the stub
//     libnvjpeg.so; it has never run on a device.
//
// # The design (owed)
//
// Each rank's decoders keep the CPU path; a rank on a device gets one
// nvJPEG decoder per device stream, fed in batches (nvjpegDecodeBatched:
// the hardware engine wants dozens of images per call). A sample Route
// sends to the GPU is decoded into a device scratch buffer, cropped and
// resized on the device (NPP's nppiResize, libnppig from the same
// packages), and written to its slot's device region (with --upload
// device the uploader then skips that sample's host bytes) or copied back
// into the host slot (host delivery: every consumer keeps working). The
// transform's geometry is the CPU path's (decode.Geometry, the same seeded
// crop), so pixels differ only by the decoders' IDCT and resampling: the
// device check states the tolerance against the CPU path. Video
// (H.264/HEVC/VP9) goes through FFmpeg's CUDA hwaccel (go-astiav's
// hardware device context) on the same principle; AV1 has no NVDEC on
// Hopper and takes the CPU path. Without a driver the node refuses to
// start with --decode-device cuda (gpu's cuinit message).
package nvjpeg
