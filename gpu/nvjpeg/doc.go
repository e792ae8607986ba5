// Package nvjpeg decodes JPEGs on the GPU's own engines (issue 18):
// nvJPEG (libnvjpeg from Debian's non-free CUDA 11.8 packages, through
// cgo), the hardware engine on GPUs that have one (A100, H100, H200) and
// the hybrid backend (Huffman on the CPU, the rest on CUDA cores).
// actors/nvdecode plugs it into the node (--decode-device cuda).
//
// # What is here
//
//   - Probe (probe.go, plain Go): a JPEG's frame header (SOF marker:
//     process, precision, size, components and their sampling), read
//     without decoding; fuzzed.
//   - Route (route.go, plain Go): the per-sample decision, pure and
//     table-tested: the hardware engine, the hybrid backend, or the CPU
//     path, with a counted reason for every sample that falls back (not
//     a JPEG, CMYK, 12-bit, arithmetic coding, too small to be worth a
//     launch, larger than the engine takes); progressive JPEGs go to the
//     hybrid backend.
//   - Decoder (decoder_cuda.go, `cuda && cgo`): an nvJPEG handle, decode
//     state and stream on one device's primary context, bound to the
//     calling OS thread: batched decode on the hardware backend (a state
//     per batch size), single-image decode on the hybrid one, into
//     device memory; with AllocDevice, AllocPinned and CopyToHost for
//     the caller's buffers. Measured on an H200 (docs/performance.md):
//     the engine decodes ~5,200 ImageNet-sized images/s at 0.13 CPU-s
//     per 1,000, 4:4:4 and grayscale bit-identical to libjpeg-turbo.
//
// # Not built
//
// Crop and resize on the device (NPP) and writing straight into a
// device slot: the node copies the full-size RGB back and transforms it
// with the CPU path's own geometry and filter (decode.TransformRGB), so
// its pixels are the CPU path's but for the decoder. Video through
// NVDEC (FFmpeg's CUDA hwaccel) is not built either.
package nvjpeg
