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

case "${1:-all}" in
audio) audio ;;
all) audio ;;
*)
	echo "usage: $0 [audio|all]" >&2
	exit 2
	;;
esac
