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
//   - The resize kernel (ResizePTX, resize_ptx.go; launched by
//     Decoder.EnqueueResize, resize_cuda.go): crop, antialiased bilinear
//     resize and flip of a decoded picture into one sample on the
//     decoder's stream, in PTX the driver compiles at load (Debian's
//     CUDA 11.8 packages carry no nvcc). actors/nvdecode's ResizePlan is
//     its tables and its Go twin. SubmitBatch (a batched decode without
//     the wait), CopyToDeviceAsync, CopyToHostAsync and Wait let a caller
//     keep two decoders' streams busy at once (actors/nvdecode's batch
//     stage).
//
// # Not built
//
// Writing the samples straight into a rank's device slot: the batch
// stage copies them out into the host slot, which is uploaded with the
// rest of the batch.
package nvjpeg
