// Command longshore-nvjpegcheck measures JPEG decoding on a GPU's own
// engines (nvJPEG) against the node's CPU path, for scripts/gpu-check.sh
// (issue 18). It needs a `-tags cuda` build (make gpu-check-bundle with
// GPU_BUNDLE_NODE=1), the driver's libcuda, libnvjpeg from CUDA 11.8 and
// FFmpeg's libraries (the CPU path is the node's decode package).
//
//	longshore-nvjpegcheck --dataset DIR [--device 0] [--epochs 3] [--batch 64]
//	    [--hw-threads 1,4] [--node-decoders 2xCPUs] [--stage-decoders CPUs --stage-batch 128]
//	    [--dump DIR --dump-n 16] [--json PATH]
//
// Every file is read into page-locked memory first (the store's side is
// not measured), probed and routed (gpu/nvjpeg.Route). Then, one after
// another, each over --epochs passes:
//
//	cpu       the node's CPU decoders (decode.Decoder, --transform train
//	          at 224: the libjpeg-turbo crop decoder with DCT scaling),
//	          one goroutine per core.
//	hardware  the GPU's JPEG engine: nvjpegDecodeBatched on the hardware
//	          backend, batches of --batch images, full-size RGB into
//	          device memory, on N threads (one decoder and stream each)
//	          for each N of --hw-threads. Only images Route sends there.
//	sweep     the engine on one thread in batches of 1, 2, 4 ... 64 over
//	          256 images a size: each size's first call (it initializes
//	          the decoder's state for that size) and the per-image time
//	          of the calls after it.
//	hybrid    nvJPEG's hybrid backend (Huffman on the CPU, IDCT on CUDA
//	          cores), one image a call, one thread a core.
//
//	node-gpu  the node's own --decode-device cuda decoders
//	          (actors/nvdecode: Route, nvJPEG, the CPU decoder's transform
//	          of the RGB, train at 224) on --node-decoders goroutines
//	          sharing one batching service; then, untimed, every image's
//	          output against the CPU path's for the same seed (tolerance:
//	          every image's mean absolute difference <= 1.0 level and
//	          <= 0.1% of values off by more than 8).
//	stage-gpu the batch decode stage (actors/nvdecode's Node, what the
//	          node's --decode-device cuda runs): --stage-decoders
//	          goroutines probe and route each image into its row of a
//	          --stage-batch batch (three slots), the stage hands the
//	          whole batch to the device (engine calls of up to 64, two
//	          in flight, crop, resize and flip on the device, one copy
//	          out a call) while the next batch's rows are filled; then,
//	          untimed, epoch 0's samples against the CPU path's, as it
//	          runs (Lowres) and decoding whole (stage_path).
//
// For each: images/s, CPU-seconds per 1,000 images (the process's
// user+system time over the pass, getrusage) and images/s per CPU core
// spent (images/s over cores busy). The hardware and hybrid passes
// decode the whole image and do not resize it; node-gpu resizes on the
// CPU, stage-gpu on the device. The GPU paths do more decoding work than
// the CPU path, which decodes at 1/2 or 1/4 scale where the crop allows.
//
// --dump writes the first --dump-n images as the hardware (else hybrid)
// backend decoded them, raw interleaved RGB (NAME.rgb, width and height
// in the JSON), for scripts/nvjpeg_compare.py to hold against a CPU
// decode of the same files.
package main
