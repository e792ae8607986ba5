#!/usr/bin/env bash
# mkmedia.sh makes the media test clips in testdata/media with Debian 12's
# ffmpeg (5.1) and espeak-ng (scripts/deps.sh base installs both), the
# same bytes on every run: bit-exact encoder flags, no metadata, fixed
# seeds. The files are committed; run this again only to change them.
#
#   scripts/mkmedia.sh [audio|video|all]   (default all)
#
# Audio: speech (espeak-ng) and a tone pair (ffmpeg's sine source), each
# encoded to WAV, FLAC, MP3, Opus and Vorbis at its own rate and channel
# count, so every test resamples; plus a half-second tone (shorter than a
# one-second window) and a file with no audio stream.
#
# Video: pans over a real photograph (decode/testdata's 1280x1024 JPEG) at
# 160x128, each frame carrying its index as a drawn counter readable from
# the pixels: in the top 16 rows, 8 blocks 10 px wide across x in
# [40, 120), block k white when bit k of the frame index is set. Encoded
# as H.264 in MP4 (25 fps, 64 frames, GOP 16, B-frames) and in MKV with
# variable frame rate (frame n at 20n + n^2 ms: intervals from 21 to 145 ms), HEVC in MP4, VP9
# in WebM, AV1 in MKV, and a 6-frame H.264 clip (shorter than a clip).
set -euo pipefail

OUT="$(cd "$(dirname "$0")/.." && pwd)/testdata/media"
mkdir -p "$OUT"
FF=(ffmpeg -hide_banner -loglevel error -y -nostdin)
BX=(-fflags +bitexact -flags:a +bitexact -map_metadata -1)

audio() {
	local tmp
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' RETURN
	# Speech: 22050 Hz mono, espeak-ng's own rate.
	espeak-ng -v en-us -s 150 -w "$tmp/speech.wav" \
		"Longshore keeps the GPU fed. Seven clips, five formats, one pipeline."
	# Tones: 440 Hz left, 660 Hz right, 44100 Hz stereo, 3 s; and 0.5 s.
	"${FF[@]}" -f lavfi -i "sine=frequency=440:sample_rate=44100:duration=3" \
		-f lavfi -i "sine=frequency=660:sample_rate=44100:duration=3" \
		-filter_complex "[0:a][1:a]join=inputs=2:channel_layout=stereo" -c:a pcm_s16le "${BX[@]}" "$tmp/tone.wav"
	"${FF[@]}" -f lavfi -i "sine=frequency=880:sample_rate=48000:duration=0.5" -c:a pcm_s16le "${BX[@]}" "$tmp/short.wav"
	for s in speech tone; do
		cp "$tmp/$s.wav" "$OUT/$s.wav"
		"${FF[@]}" -i "$tmp/$s.wav" -c:a flac "${BX[@]}" "$OUT/$s.flac"
		"${FF[@]}" -i "$tmp/$s.wav" -c:a libmp3lame -b:a 64k "${BX[@]}" "$OUT/$s.mp3"
		"${FF[@]}" -i "$tmp/$s.wav" -c:a libopus -b:a 48k "${BX[@]}" "$OUT/$s.opus"
		"${FF[@]}" -i "$tmp/$s.wav" -c:a libvorbis -q:a 3 "${BX[@]}" "$OUT/$s.ogg"
	done
	cp "$tmp/short.wav" "$OUT/short.wav"
	"${FF[@]}" -i "$tmp/short.wav" -c:a flac "${BX[@]}" "$OUT/short.flac"
	# No audio stream: a still image in a Matroska file.
	"${FF[@]}" -f lavfi -i "color=c=red:size=16x16:duration=0.1:rate=10" -c:v ffv1 "${BX[@]}" "$OUT/noaudio.mkv"
}

video() {
	local photo
	photo="$(dirname "$OUT")/../decode/testdata/large_1280x1024_q90_420.jpg"
	local bit="255*mod(floor(N/pow(2,floor((X-40)/10))),2)"
	local on="lt(Y,16)*gte(X,40)*lt(X,120)"
	local pan="crop=640:512:x='n*8':y='n*4',scale=160:128:flags=bicubic,format=rgb24"
	local counter="geq=r='if($on,$bit,r(X,Y))':g='if($on,$bit,g(X,Y))':b='if($on,$bit,b(X,Y))',format=yuv420p"
	local src=(-loop 1 -framerate 25 -i "$photo")
	local vx=(-fflags +bitexact -flags:v +bitexact -map_metadata -1 -threads 1)
	"${FF[@]}" "${src[@]}" -vf "$pan,$counter" -frames:v 64 -c:v libx264 -preset medium -crf 16 -g 16 -bf 2 \
		-x264-params threads=1 "${vx[@]}" "$OUT/cfr_h264.mp4"
	"${FF[@]}" "${src[@]}" -vf "$pan,$counter,settb=1/1000,setpts='(0.02*N+0.001*N*N)/TB'" -frames:v 64 -fps_mode passthrough -enc_time_base 1:1000 \
		-c:v libx264 -preset medium -crf 16 -g 16 -bf 0 -x264-params threads=1 "${vx[@]}" "$OUT/vfr_h264.mkv"
	"${FF[@]}" "${src[@]}" -vf "$pan,$counter" -frames:v 64 -c:v libx265 -crf 16 -g 16 \
		-x265-params "log-level=error:pools=none:frame-threads=1" -tag:v hvc1 "${vx[@]}" "$OUT/hevc.mp4"
	"${FF[@]}" "${src[@]}" -vf "$pan,$counter" -frames:v 64 -c:v libvpx-vp9 -crf 20 -b:v 0 -g 16 -deadline good -cpu-used 5 \
		"${vx[@]}" "$OUT/vp9.webm"
	"${FF[@]}" "${src[@]}" -vf "$pan,$counter" -frames:v 64 -c:v libaom-av1 -crf 20 -b:v 0 -g 16 -cpu-used 8 \
		-row-mt 0 "${vx[@]}" "$OUT/av1.mkv"
	"${FF[@]}" "${src[@]}" -vf "$pan,$counter" -frames:v 6 -c:v libx264 -crf 16 -x264-params threads=1 "${vx[@]}" "$OUT/short_h264.mp4"
}

case "${1:-all}" in
audio) audio ;;
video) video ;;
all)
	audio
	video
	;;
*)
	echo "usage: $0 [audio|video|all]" >&2
	exit 2
	;;
esac
