#!/usr/bin/env bash
# gpu-check.sh: the device check of issue 18, one prepared run on a machine
# with an NVIDIA GPU, PyTorch (and torchvision) and no Go or FFmpeg.
#
# Here (a machine with Go):
#   make gpu-check-bundle                 # = cuda-check with CUDA_OUT, then --bundle
#   scripts/gpu-check.sh --bundle DIR     # DIR/bin must hold the -tags cuda binaries
#   scripts/gpu-check.sh --parts DIR OUT [BYTES]  # DIR xz'd and cut for carries of
#                                         # at most 64 MiB (make gpu-check-parts)
#     GPU_BUNDLE_NODE=1 also carries longshore-node and
#     longshore-nvjpegcheck, the libraries ldd lists for them (FFmpeg's
#     pull in ~235 MB, ~85 MB as zstd: split the carry where it is limited),
#     nvJPEG and the CUDA runtime from make cuda-check's cache, and the
#     source photographs of scripts/mkdataset.py (scaled to 1600 px, its
#     working size, ~15 MB) to make the JPEG dataset there
#     (GPU_CHECK_N images, 4000 by default); GPU_BUNDLE_DATA=copy carries
#     the dataset itself instead.
# There:
#   DIR/gpu-check.sh --run [--out FILE]  # under 5 minutes; writes a JSON table
#   GPU_CHECK_WORK=DIR keeps the logs there (default: a temporary directory)
#   GPU_CHECK_TWIN=1 DIR/gpu-check.sh --run  # a dry run on a CPU (plain build, gpu.Twin,
#                                            # tiny model): checks the bundle, measures nothing
#
# What it measures (docs/performance.md, "GPU"):
#   1. copy: the device's pinned host-to-device peak (cuMemcpyHtoDAsync from
#      cuMemHostAlloc memory) and longshore's uploader GB/s per host mode
#      (register: the memfd slots page-locked in place; staged; pageable),
#      with a round trip per slot (device bytes read back == host bytes).
#   2. loop: a ResNet-50 forward+backward (bf16 autocast, channels_last) fed
#      by the Python client from longshore-gpucheck serve (the node's
#      pipeline and feed over synthetic samples: delivery, not decoding),
#      with host delivery (pin_memory, .cuda(non_blocking=True)) and device
#      delivery (CUDA IPC), and a synthetic on-GPU baseline: images/s and
#      the share of steps the GPU waited on data.
#   3. with GPU_BUNDLE_NODE: the same loop fed by longshore-node decoding
#      JPEGs on the CPU (--upload host), when its libraries resolve there.
#   4. with GPU_BUNDLE_NODE: nvJPEG (longshore-nvjpegcheck: the JPEG engine
#      batched, the hybrid backend) against the node's CPU path, images/s
#      and CPU-s per 1,000 images; the decoded pixels against libjpeg-turbo
#      (scripts/nvjpeg_compare.py, tolerance stated there) and torchvision's
#      own GPU decode as a peer figure; the batch decode stage alone
#      (issue 38: whole batches of 128 to the engine in calls of 64, two in
#      flight, crop and resize on the device), images/s, CPU-s per 1,000
#      and its samples against the CPU path's (stage_path). The node's
#      --decode-device cuda runs (node-null-gpu, the node-gpu loop) use
#      the batch stage: images/s and CPU an image against the CPU path's,
#      the CPU share, and the GPU's waits in the ResNet-50 loop.
#   5. with GPU_BUNDLE_NODE: video on NVDEC (longshore-nvdeccheck over the
#      bundle's clips: the test clips and 720p H.264, HEVC and VP9 pans
#      over a photograph made here): each clip's pixels against the CPU
#      path's (mean absolute difference within 1.5), clips/s and CPU-s a
#      clip on each path; then the node itself, --media video
#      --decode-device cuda, counting where clips were decoded.
# Targets (issue 18): uploader >= 80% of the pinned peak; the GPU waits on
# data in < 5% of steps whenever the CPU path can keep up; nvJPEG >= 3x the
# CPU path's images/s per CPU core spent. Issue 38: --decode-device cuda >=
# 1.0x the CPU path's images/s at <= 0.3x its CPU an image, the GPU waiting
# in < 5% of steps; then 6,000 images/s with the CPUs at most half busy.
#
# GPU_CHECK_STEPS="node nvjpeg ..." runs only the steps named (the others
# are left out of the table).
#
# GPU_CHECK_BENCH_PEER=1 (issue 19, after the check and outside its
# budget): scripts/bench_peer.py on this machine's cores over the same
# dataset, the peer's num_workers swept to 16 (GPU_CHECK_PEER_WORKERS),
# its JSON beside the table as bench-peer.json.
set -euo pipefail

usage() { sed -n '2,12p' "$0" >&2; exit 2; }

bundle() {
	local dir=$1 here repo
	here=$(cd "$(dirname "$0")" && pwd)
	repo=$(cd "$here/.." && pwd)
	[ -x "$dir/bin/longshore-gpucheck" ] || { echo "gpu-check: $dir/bin/longshore-gpucheck missing: run make gpu-check-bundle" >&2; exit 1; }
	mkdir -p "$dir/python"
	rm -rf "$dir/python/longshore"
	cp -r "$repo/clients/python/longshore" "$dir/python/"
	find "$dir/python" -name __pycache__ -prune -exec rm -rf {} +
	cp "$here/gpu_train_check.py" "$here/gpu-check.sh" "$dir/"
	if [ "${GPU_BUNDLE_NODE:-0}" = 1 ]; then
		mkdir -p "$dir/lib"
		# Every library ldd resolves except the C library's own and the
		# driver's (libcuda comes with the target's driver).
		ldd "$dir/bin/longshore-node" | awk '$3 ~ /^\// {print $3}' |
			grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libcuda)\.so' |
			while read -r l; do cp -L "$l" "$dir/lib/"; done
		ldd "$dir/bin/longshore-nvjpegcheck" | awk '$3 ~ /^\// {print $3}' |
			grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libcuda)\.so' |
			while read -r l; do cp -L "$l" "$dir/lib/"; done
		video_clips "$dir/video" "$repo"
		# nvJPEG and the CUDA runtime it needs, from make cuda-check's cache.
		local cuda=${CUDA_CACHE:-${LONGSHORE_CACHE:-$HOME/.cache/longshore}/cuda}/root/usr/lib/x86_64-linux-gnu
		cp -L "$cuda"/libnvjpeg.so.11 "$cuda"/libcudart.so.11.0 "$dir/lib/"
		cp "$here/mkdataset.py" "$here/bench_peer.py" "$here/nvjpeg_compare.py" "$dir/"
		rm -rf "$dir/data" "$dir/sources"
		if [ "${GPU_BUNDLE_DATA:-sources}" = copy ]; then
			local ds
			ds=$("$repo/scripts/dataset.sh" "${GPU_BUNDLE_N:-512}")
			cp -r "$ds" "$dir/data"
		else
			"$repo/scripts/dataset.sh" 1 >/dev/null # fetches and unpacks the photographs
			/usr/bin/python3 - "${LONGSHORE_CACHE:-$HOME/.cache/longshore}/photos/tree" "$dir/sources" "$here" <<'PY'
import os, sys
sys.path.insert(0, sys.argv[3])
import mkdataset
from PIL import Image
src, out = sys.argv[1], sys.argv[2]
for rel in mkdataset.SOURCES:
    p = os.path.join(src, rel)
    if not os.path.exists(p):
        continue
    im = Image.open(p).convert("RGB")
    im.thumbnail((1600, 1600), Image.BILINEAR)  # mkdataset's own working size
    os.makedirs(os.path.dirname(os.path.join(out, rel)), exist_ok=True)
    im.save(os.path.join(out, rel), "JPEG", quality=95)
PY
		fi
	else
		rm -f "$dir/bin/longshore-node" "$dir/bin/longshore-coordinator" "$dir/bin/longshore-nvjpegcheck" "$dir/bin/longshore-nvdeccheck"
		rm -rf "$dir/video"
	fi
	echo "gpu-check: bundle in $dir ($(du -sh "$dir" | cut -f1)); on the GPU machine: $dir/gpu-check.sh --run" >&2
}

# video_clips DIR REPO: the clips of the NVDEC step: the committed test
# clips (160x128: HEVC's is under NVDEC's 144-line minimum, a refusal
# to count) and three 720p clips, 8 s at 30 fps, a pan down a real
# photograph, H.264 (B-frames), HEVC and VP9, made with ffmpeg here.
video_clips() {
	local out=$1 repo=$2 photo
	rm -rf "$out" && mkdir -p "$out/a"
	cp "$repo"/testdata/media/{cfr_h264.mp4,vfr_h264.mkv,hevc.mp4,vp9.webm,av1.mkv} "$out/a/"
	photo="$repo/decode/testdata/large_1280x1024_q90_420.jpg"
	local ff=(ffmpeg -hide_banner -loglevel error -y -nostdin -loop 1 -framerate 30 -i "$photo" -vf "crop=1280:720:0:'min(t*36,304)'" -frames:v 240 -pix_fmt yuv420p)
	"${ff[@]}" -c:v libx264 -preset fast -crf 20 -g 60 -bf 2 "$out/a/h264_720p.mp4"
	"${ff[@]}" -c:v libx265 -preset fast -crf 24 -g 60 -x265-params log-level=error "$out/a/hevc_720p.mp4"
	"${ff[@]}" -c:v libvpx-vp9 -crf 32 -b:v 0 -g 60 -deadline realtime -cpu-used 8 "$out/a/vp9_720p.webm"
}

# wanted NAME: the step is to run (GPU_CHECK_STEPS unset, or names it).
wanted() { [ -z "${GPU_CHECK_STEPS:-}" ] || [[ " $GPU_CHECK_STEPS " == *" $1 "* ]]; }

# step NAME SECONDS CMD...: run with a time limit (and within the whole
# run's budget, GPU_CHECK_BUDGET seconds, 285 by default: under 5 minutes
# with the summary), log to $work/NAME.log.
step() {
	local name=$1 limit=$2
	shift 2
	wanted "$name" || return 1
	local left=$((${GPU_CHECK_BUDGET:-285} - (SECONDS - t0)))
	if [ "$left" -lt 15 ]; then
		echo "gpu-check: $name skipped: the run's time budget is spent" >&2
		return 1
	fi
	[ "$limit" -le "$left" ] || limit=$left
	echo "gpu-check: $name (at most $limit s)" >&2
	local rc=0
	timeout --kill-after=5 "$limit" "$@" >"$work/$name.log" 2>&1 || rc=$?
	[ $rc -ne 0 ] || return 0
	[ $rc -ne 124 ] || echo "gpu-check: $name: timed out after $limit s" >>"$work/$name.log"
	echo "gpu-check: $name failed, exit $rc (log: $work/$name.log):" >&2
	tail -5 "$work/$name.log" >&2
	return 1
}

# loop NAME SERVE-CMD... -- TRAIN-ARGS...: a feed server in the background
# and the trainer against it.
loop() {
	local name=$1
	shift
	wanted "$name" || return 1 # before starting its server
	local serve=() train=()
	while [ "$1" != -- ]; do serve+=("$1"); shift; done
	shift
	train=("$@")
	local fd="$work/feed-$name"
	mkdir -p "$fd"
	"${serve[@]}" --feed-dir "$fd" >"$work/$name-serve.log" 2>&1 &
	local pid=$!
	for _ in $(seq 300); do [ -S "$fd/rank-0.sock" ] && break; sleep 0.1; done
	local ok=0
	step "$name" 60 python3 "$dir/gpu_train_check.py" --socket "$fd/rank-0.sock" --json "$work/$name.json" "${train[@]}" || ok=1
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	return $ok
}

run() {
	dir=$(cd "$(dirname "$0")" && pwd)
	local out=${OUT_JSON:-$dir/gpu-check.json}
	work=${GPU_CHECK_WORK:-$(mktemp -d)}
	mkdir -p "$work"
	export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	t0=$SECONDS
	nvidia-smi -L >"$work/nvidia-smi.log" 2>&1 || true
	python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))' >"$work/torch.log" 2>&1 || true
	local twin=() small=() cpu=()
	if [ "${GPU_CHECK_TWIN:-0}" = 1 ]; then
		twin=(--twin) small=(--size 32 --batch-size 16 --samples 256) cpu=(--device cpu --size 32 --batch-size 16 --steps 20 --warmup 5)
	fi
	local copysize=()
	[ ${#twin[@]} -eq 0 ] || copysize=(--peak-bytes 8388608 --slot-bytes 1000000 --iters 5)
	step copy 45 "$dir/bin/longshore-gpucheck" copy "${twin[@]}" "${copysize[@]}" --json "$work/copy.json" || true
	local g="$dir/bin/longshore-gpucheck"
	step synthetic 60 python3 "$dir/gpu_train_check.py" --mode synthetic "${cpu[@]}" --json "$work/synthetic.json" || true
	loop host "$g" serve --upload host "${twin[@]}" "${small[@]}" -- --mode host "${cpu[@]}" || true
	if [ "${GPU_CHECK_TWIN:-0}" != 1 ]; then # device delivery needs CUDA in the trainer too
		loop device "$g" serve --upload device -- --mode device || true
	fi
	if [ ! -d "$dir/data" ] && [ -d "$dir/sources" ]; then
		local n=${GPU_CHECK_N:-4000}
		step dataset 150 python3 "$dir/mkdataset.py" --out "$dir/data.tmp" --n "$n" --seed 1 --sources "$dir/sources" &&
			mv "$dir/data.tmp" "$dir/data" || true
	fi
	local nodeok=0
	if [ -x "$dir/bin/longshore-node" ] && [ -d "$dir/data" ]; then
		if ldd "$dir/bin/longshore-node" | grep -q 'not found'; then
			ldd "$dir/bin/longshore-node" | grep 'not found' >"$work/node-missing.log"
			echo "gpu-check: longshore-node: libraries missing here (see node-missing.log): real-decode loop skipped" >&2
		else
			nodeok=1
			# --drop-last: one batch shape, as a trainer with cudnn.benchmark
			# wants (an epoch's short batch costs a new autotune: seconds).
			loop node "$dir/bin/longshore-node" --standalone --sink feed --dataset "$dir/data" --epochs 1000 --batch-size 128 \
				--drop-last --gpus 0 --upload host -- --mode host || true
		fi
	fi
	if [ $nodeok = 1 ] && [ "${GPU_CHECK_TWIN:-0}" != 1 ]; then
		# The node itself, --sink null, three epochs: the CPU path, then
		# --decode-device cuda with its default decoders (one a core) and
		# with twice as many (larger batches for the engine).
		local nn=("$dir/bin/longshore-node" --standalone --sink null --dataset "$dir/data" --epochs 3 --batch-size 128)
		step node-null-cpu 60 "${nn[@]}" --stats-json "$work/node-null-cpu.json" || true
		step node-null-gpu 60 "${nn[@]}" --decode-device cuda --stats-json "$work/node-null-gpu.json" || true
		step node-null-gpu-2x 60 "${nn[@]}" --decode-device cuda --decoders $((2 * $(nproc))) --stats-json "$work/node-null-gpu-2x.json" || true
		loop node-gpu "$dir/bin/longshore-node" --standalone --sink feed --dataset "$dir/data" --epochs 1000 --batch-size 128 \
			--drop-last --gpus 0 --upload host --decode-device cuda -- --mode host || true
	fi
	if [ $nodeok = 1 ] && [ -x "$dir/bin/longshore-nvjpegcheck" ] && [ "${GPU_CHECK_TWIN:-0}" != 1 ]; then
		step nvjpeg 150 "$dir/bin/longshore-nvjpegcheck" --dataset "$dir/data" --epochs 3 --dump "$work/dump" --dump-n 24 --json "$work/nvjpeg.json" &&
			step compare 60 python3 "$dir/nvjpeg_compare.py" --report "$work/nvjpeg.json" --dump "$work/dump" \
				--dataset "$dir/data" --peer --json "$work/compare.json" || true
	fi
	if [ $nodeok = 1 ] && [ -x "$dir/bin/longshore-nvdeccheck" ] && [ -d "$dir/video" ]; then
		local tw=()
		[ "${GPU_CHECK_TWIN:-0}" != 1 ] || tw=(--twin --reps 1)
		step nvdec 90 "$dir/bin/longshore-nvdeccheck" --media "$dir/video/a" --reps 10 "${tw[@]}" --json "$work/nvdec.json" || true
		if [ "${GPU_CHECK_TWIN:-0}" != 1 ]; then
			step node-video-gpu 60 "$dir/bin/longshore-node" --standalone --sink null --media video --dataset "$dir/video" \
				--epochs 20 --batch-size 4 --decode-device cuda --stats-json "$work/node-video-gpu.json" || true
		fi
	fi
	python3 - "$work" "$out" "$((SECONDS - t0))" "${GPU_CHECK_TWIN:-0}" <<'EOF'
import json, os, sys
work, out, secs, dry = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
def load(n):
    p = os.path.join(work, n + ".json")
    return json.load(open(p)) if os.path.exists(p) else None
def text(n):
    p = os.path.join(work, n + ".log")
    return open(p).read().strip() if os.path.exists(p) else ""
copy = load("copy")
nvj, cmp_ = load("nvjpeg"), load("compare")
loops = {n: load(n) for n in ("synthetic", "host", "device", "node", "node-gpu")}
nodes = {n: load(n) for n in ("node-null-cpu", "node-null-gpu", "node-null-gpu-2x")}
nvdec, nvideo = load("nvdec"), load("node-video-gpu")
t = {"seconds": secs, "gpus": text("nvidia-smi"), "torch": text("torch"), "copy": copy,
     "loops": {n: r for n, r in loops.items() if r}, "nvjpeg": nvj, "nvjpeg_pixels": cmp_,
     "node_sink_null": {n: {k: r.get(k) for k in ("images", "images_per_second", "cpu_seconds", "cpu_ms_per_image", "gpu_decode", "failures")}
                        for n, r in nodes.items() if r},
     "nvdec": nvdec, "node_video_gpu": {k: nvideo.get(k) for k in ("images", "images_per_second", "cpu_seconds", "gpu_video_decode", "failures")} if nvideo else None}
checks = {}
if copy:
    reg = next((m for m in copy["upload"] if m["mode"] == "register"), None)
    checks["round_trips_equal"] = all(m.get("round_trips_equal") for m in copy["upload"] if not m.get("error"))
    if reg and not reg.get("error"):
        checks["upload_of_pinned_peak"] = reg["of_pinned_peak"]
        checks["upload_target_80pct_met"] = reg["of_pinned_peak"] >= 0.8
for n in ("host", "device", "node", "node-gpu"):
    r = loops.get(n)
    if r:
        checks[f"{n}_waited_share"] = r["waited_share"]
        checks[f"{n}_target_5pct_met"] = r["waited_share"] < 0.05
if nvj:
    hw = [p for p in nvj["passes"] if p["name"] == "hardware" and p["images"] > 0]
    if hw:
        best = max(hw, key=lambda p: p["per_core_vs_cpu"])
        checks["nvjpeg_per_core_vs_cpu"] = best["per_core_vs_cpu"]
        checks["nvjpeg_target_3x_met"] = best["per_core_vs_cpu"] >= 3
    else:
        checks["nvjpeg_hardware_backend"] = nvj.get("hardware_error") or "no image routed to it"
if nvj and nvj.get("node_path"):
    np_ = nvj["node_path"]
    checks["node_gpu_decode_per_core_vs_cpu"] = np_["pass"]["per_core_vs_cpu"]
    checks["node_gpu_decode_pixels_within_tolerance"] = np_["within_tolerance"]
if nvj and nvj.get("stage_path"):  # the batch decode stage alone (issue 38)
    sp = nvj["stage_path"]
    checks["stage_gpu_decode_images_per_s"] = sp["pass"]["images_per_s"]
    checks["stage_gpu_decode_per_core_vs_cpu"] = sp["pass"].get("per_core_vs_cpu")
    checks["stage_gpu_decode_pixels_within_tolerance"] = sp["within_tolerance"]
    checks["stage_gpu_decode_pixels_within_tolerance_without_lowres"] = sp["within_tolerance_whole"]
c, g = nodes.get("node-null-cpu"), nodes.get("node-null-gpu")
if c and g and g.get("cpu_ms_per_image"):
    checks["node_decode_device_cuda_cpu_per_image_vs_cpu"] = g["cpu_ms_per_image"] / c["cpu_ms_per_image"]
    checks["node_decode_device_cuda_target_0.3x_cpu_met"] = g["cpu_ms_per_image"] <= 0.3 * c["cpu_ms_per_image"]
if c and g and g.get("images_per_second") and c.get("images_per_second"):
    # Issue 38's targets: >= 1.0x the CPU path's images/s at <= 0.3x its
    # CPU an image; then 6,000 images/s with the CPUs at most half busy.
    ratio = g["images_per_second"] / c["images_per_second"]
    checks["node_decode_device_cuda_images_per_s_vs_cpu"] = ratio
    checks["node_decode_device_cuda_target_1x_met"] = ratio >= 1.0
    if g.get("cpu_ms_per_image"):
        share = g["cpu_ms_per_image"] * g["images_per_second"] / 1000 / (os.cpu_count() or 1)
        checks["node_decode_device_cuda_cpu_share"] = share
        checks["node_decode_device_cuda_target_6000_half_cpu_met"] = g["images_per_second"] >= 6000 and share <= 0.5
if cmp_:
    checks["nvjpeg_pixels_within_tolerance"] = cmp_["all_within_tolerance"]
if nvdec:
    checks["nvdec_clips_on_device"] = nvdec["clips_on_device"]
    checks["nvdec_pixels_within_tolerance"] = nvdec["within_tolerance"]
    checks["nvdec_clips_per_second_vs_cpu"] = nvdec["nvdec_clips_per_second_vs_cpu"]
    checks["nvdec_per_core_vs_cpu"] = nvdec["nvdec_clips_per_cpu_second_vs_cpu"]
if nvideo and nvideo.get("gpu_video_decode"):
    checks["node_video_gpu_decode"] = nvideo["gpu_video_decode"]
if dry:  # the twin and a CPU: the plumbing ran; no figure means anything
    checks = {k: v for k, v in checks.items() if k in ("round_trips_equal", "nvdec_pixels_within_tolerance")}
    t["dry_run"] = True
t["checks"] = checks
t["failed_steps"] = sorted(f[:-4] for f in os.listdir(work) if f.endswith(".log") and f[:-4] in ("copy", "synthetic", "host", "device", "node", "node-gpu", "nvjpeg", "compare", "nvdec", "node-video-gpu")
                           and not os.path.exists(os.path.join(work, f[:-4] + ".json")))
json.dump(t, open(out, "w"), indent=2)
print(json.dumps(checks, indent=2))
print(f"gpu-check: {out} ({secs} s); logs in {work}", file=sys.stderr)
EOF
	if [ "${GPU_CHECK_BENCH_PEER:-0}" = 1 ] && [ $nodeok = 1 ]; then
		echo "gpu-check: bench_peer (issue 19) on $(nproc) cores" >&2
		GPU_CHECK_BUDGET=100000 step bench-peer "${GPU_CHECK_PEER_TIMEOUT:-300}" python3 "$dir/bench_peer.py" --dataset "$dir/data" \
			--node "$dir/bin/longshore-node" --reps "${GPU_CHECK_PEER_REPS:-1}" --workers "${GPU_CHECK_PEER_WORKERS:-4,8,12,16}" \
			--no-minio --no-ceiling --json "$(dirname "$out")/bench-peer.json" || true
		cp "$work/bench-peer.log" "$(dirname "$out")/bench-peer.log" 2>/dev/null || true
	fi
}

# parts DIR OUT [BYTES]: DIR as one xz-compressed tar cut into parts of
# BYTES (54,000,000 by default: one part and the repository fit a 64 MiB
# carry), OUT/part-aa, part-ab, ...; there: cat part-* | xz -d | tar -x.
parts() {
	local dir=$1 out=$2 bytes=${3:-54000000}
	[ -d "$dir" ] || { echo "gpu-check: $dir: no bundle" >&2; exit 1; }
	rm -rf "$out" && mkdir -p "$out"
	tar -C "$(dirname "$dir")" -c "$(basename "$dir")" | xz -9e -T0 | split -b "$bytes" - "$out/part-"
	echo "gpu-check: $(ls "$out" | wc -l) parts in $out ($(du -sh "$out" | cut -f1)); there: cat part-* | xz -d | tar -x -C /tmp" >&2
}

case "${1:-}" in
--bundle) [ $# -eq 2 ] || usage; bundle "$2" ;;
--parts) [ $# -ge 3 ] || usage; parts "$2" "$3" "${4:-}" ;;
--run)
	[ "${2:-}" = --out ] && OUT_JSON=$3
	run
	;;
*) usage ;;
esac
