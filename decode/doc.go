// Package decode turns one encoded image (JPEG, PNG or WebP bytes in
// memory) into one training sample: uint8 RGB, Size×Size, cropped and
// resized the way torchvision's transforms would, written straight into a
// slot of a batch buffer that the caller owns.
//
// # Who calls it
//
// The node's decoder stage (actors/) runs one Decoder per worker goroutine
// and calls Decode once per sample, with the bytes the fetcher got and the
// slot the batcher lent:
//
//	d, err := decode.NewDecoder(cfg) // once per goroutine
//	defer d.Close()
//	...
//	seed := decode.SampleSeed(jobSeed, epoch, index)
//	info, err := d.Decode(data, seed, slot) // len(slot) == cfg.SampleBytes()
//	if err != nil { /* a per-sample error: count it, skip the sample */ }
//
// # Contract
//
//   - Concurrency: a Decoder is not safe for concurrent use; use one per
//     goroutine. Different Decoders run fully in parallel (FFmpeg's mjpeg,
//     png and webp decoders and swscale keep no global state here; the
//     decoders run single-threaded, so parallelism is the caller's number
//     of goroutines).
//   - Blocking: Decode is CPU-bound (about 1.6-1.7 ms for an ImageNet-sized
//     JPEG on the fast path, 2.1-2.5 ms through FFmpeg, on one core of this
//     project's machines) and never blocks on I/O. It takes no context: a
//     call cannot be interrupted, so size the work, not the wait.
//   - Ownership: data is read only during the call and not retained. dst is
//     written only during the call; on success it holds the whole sample
//     (every byte written), on error its content is unspecified. The
//     Decoder keeps no reference to either.
//   - Output: uint8 RGB, full range. NCHW is three Size×Size planes R, G,
//     B; NHWC is Size rows of Size RGB triplets. No normalisation (mean/std)
//     is applied: that belongs on the GPU.
//   - Determinism: the output is a pure function of (Config, data,
//     sampleSeed); SamplingFor (and CropFor, its crop box and flip) gives
//     the geometry without decoding.
//   - Errors: bad data gives an error wrapping ErrCorrupt, ErrUnsupported
//     or ErrTooLarge (decompression bombs are refused from the header,
//     before decoding, by Config.MaxPixels). Other errors (out of memory, a
//     closed Decoder, a dst of the wrong size) are the caller's or the
//     machine's problem.
//   - Memory: a warm Decoder allocates nothing in Go per sample. In C it
//     holds, per format and lowres level used, FFmpeg's frame pool sized for
//     the largest image seen (about 1.5-3 bytes per pixel; progressive JPEG
//     adds 6 bytes per pixel of coefficients), a packet buffer as large as
//     the largest file, up to four swscale contexts and an RGB copy of the
//     largest region converted (3 bytes per pixel, plus as much again for
//     vertically subsampled chroma); for the JPEG fast path, one libjpeg
//     decompressor (its per-image tables are malloc'd and freed by libjpeg
//     each image) and a row buffer as large as the largest region decoded
//     (3 bytes per pixel); and the scaler's filter tables and row buffers
//     (tens of KB). With ImageNet-sized
//     images that is a few MB per Decoder; the worst case is bounded by
//     MaxPixels (about 1 GB at the default 89 Mpixel limit, so lower it for
//     nodes with many decoders).
//
// # Transforms are op lists
//
// A Transform is compiled from an ordered list of named ops with
// parameters (Ops, ParseOps, ParseTransform; the presets train, eval and
// resize are op lists, Presets): the geometric ops first, fused into the
// crop decoder (SamplingFor), then pixel ops applied in order to the
// decoded sample (PixelOps: brightness, grayscale), each with its own
// seeded draws (PixelDrawsFor says what they drew for a sample: the
// decoder's own draws). The output side is the sample spec's (package
// decode/spec, Config.Spec). See docs/stages.md.
//
// # What the output is
//
// Alpha is dropped without compositing: a transparent pixel gives the
// colour stored under it (PIL's convert("RGB") does the same). EXIF
// orientation is not applied (PIL does not either unless asked). JPEG
// CMYK/YCCK (Adobe) is converted to RGB naively, as FFmpeg, Go and PIL do:
// the fast path rounds as PIL does, FFmpeg truncates (a level darker);
// ICC profiles are ignored. A JPEG without its EOI marker is refused as
// truncated, and PNG chunk CRCs are checked, as PIL does; damage inside a
// JPEG or WebP bitstream that the decoder can conceal is not detected.
//
// Geometry: SamplingFor places the Size×Size output on the source exactly
// where torchvision 0.14 puts it on a PIL image, in fractional source
// coordinates: Train's crop box (F.resized_crop: the filter reads the crop
// only), Eval's center crop of the Resize(ResizeShort) image mapped back
// to the source without rounding (the filter reads across the crop's
// edges, up to the image's, as resizing the whole image first does). Only
// the pixels the filter reads are decoded and scaled to Size×Size by
// resize.c: PIL's bilinear filter (a triangle widened by the downscale
// factor, so antialiased) in fixed point, SIMD on x86-64, on both paths
// (the FFmpeg path first converts that region of its frame to RGB with
// swscale, at full size). See docs/fidelity.md for how close the pixels
// are to torchvision's.
//
// The JPEG fast path (Config.FastJPEG, on by default): 8-bit Huffman-coded
// YCbCr, RGB and grayscale JPEGs, baseline or progressive, are decoded by
// libjpeg-turbo, which decodes only the crop: it skips the rows above it
// (jpeg_skip_scanlines still Huffman-decodes them, but does no IDCT or
// colour conversion), decodes only the iMCU columns that cover it
// (jpeg_crop_scanline), stops after its last row, and converts YCbCr to
// RGB itself; resize.c then scales the packed RGB region straight into
// the slot, flipping as it goes. On 470x390 quality-96 4:4:4 photos that
// is about 1.5x faster for Train (1.64 against 2.46 CPU-ms per image over
// a 512-image ImageNet-like set, with swscale as its scaler) and 1.25x for
// Eval; resize.c instead of swscale (which needs a new context for each
// source size) took another 17% off Train and 14-19% off Eval (see
// docs/performance.md). Its pixels match the FFmpeg path's within the
// IDCT's rounding for 4:4:4 and gray (mean |difference| 0.02-0.05
// levels, 99th percentile 1), and the reference pipeline's (Go's decoder,
// x/image/draw's bilinear) within 0.25-0.35 levels; for 4:2:0 and 4:2:2
// it is the more exact of the two (libjpeg upsamples the chroma at full
// size before the region is cut; swscale misregisters it on regions that
// start between chroma samples). CMYK and YCCK JPEGs are decoded to CMYK
// by libjpeg and converted as PIL's convert("RGB") does. Whether three
// components are RGB or YCbCr is libjpeg's choice on every path
// (internal/jpegcolour): FFmpeg's planes are relabelled where its own
// rule differs. 12-bit, lossless and arithmetic-coded JPEGs, and any file libjpeg raises an error on, go to
// FFmpeg instead (Info.Path, Info.Fallback, Decoder.Stats): so which
// samples decode, and which fail with ErrCorrupt, does not depend on
// FastJPEG. With Lowres, the fast path also scales by 4/8, 2/8 or 1/8 in
// the IDCT when the crop keeps both sides >= Size (Info.DCTScale), with
// the same trade-off as FFmpeg's lowres below.
//
// Lowres (Config.Lowres): FFmpeg decodes JPEGs at 1/2, 1/4 or 1/8 size when
// the crop still has Size pixels per side at that scale. It cuts Eval and
// Resize time on large photos by about a quarter (1/4 scale on 1280x1024);
// Train crops on ImageNet-sized images are never large enough to use it,
// and on large images Train saw no measurable gain (mostly 1/2 scale,
// where Huffman decoding, not the IDCT, dominates). The scaled IDCT is a
// sharper low-pass than antialiased bilinear, so lowres output is not the
// full-size output: mean |difference| 0.5 levels on a portrait, up to 2.3
// on a grass photo. Turn it off where matching torchvision's pixels
// matters more than Eval speed (docs/fidelity.md).
package decode
