#!/bin/sh
# make.sh regenerates the decode test fixtures from real photographs that
# Debian 12 ships. Run from anywhere; needs network access to the Debian
# archive (apt-get download) and these tools:
#
#   apt-get install -y libjpeg-turbo-progs webp imagemagick libjpeg-dev gcc
#
# The outputs are committed; rerunning may change bytes (tool versions) but
# not what the tests check. Keep the total under 1 MB.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# ImageMagick 6 as Debian packages it (a stand-in may shadow "convert").
IM=/usr/bin/convert

apt-get download python-matplotlib-data mate-backgrounds >/dev/null
dpkg -x python-matplotlib-data_*.deb x
dpkg -x mate-backgrounds_*.deb x
hopper=x/usr/share/matplotlib/mpl-data/sample_data/grace_hopper.jpg  # 512x600 photo
meadow=x/usr/share/backgrounds/mate/nature/GreenMeadow.jpg           # 1280x1024 photo

# Base: a square (160x160) real photo, so that Resize to the image's own
# size is an identity geometry and the tests can compare tightly.
$IM "$hopper" -strip -gravity center -crop 480x480+0-40 +repage -filter Triangle \
	-resize 160x160! -depth 8 ppm:base.ppm
# Odd-sized and not square (161x123): chroma edges of 4:2:0 with odd sides.
$IM "$hopper" -strip -gravity center -crop 483x369+0-40 +repage -filter Triangle \
	-resize 161x123! -depth 8 ppm:odd.ppm

out="$here"
# JPEG: baseline 4:2:0, 4:2:2, 4:4:4, progressive, grayscale.
cjpeg -quality 90 -sample 2x2 -outfile "$out/jpeg_420.jpg" base.ppm
cjpeg -quality 90 -sample 2x2 -outfile "$out/jpeg_420_odd.jpg" odd.ppm
cjpeg -quality 90 -sample 2x1 -outfile "$out/jpeg_422.jpg" base.ppm
cjpeg -quality 95 -sample 1x1 -outfile "$out/jpeg_444.jpg" base.ppm
# RGB components (Adobe APP14 transform 0, ids R, G, B): the colour tests
# rewrite its markers into every combination libjpeg and FFmpeg read.
cjpeg -rgb -quality 95 -sample 1x1 -outfile "$out/jpeg_rgb.jpg" base.ppm
cjpeg -quality 90 -progressive -outfile "$out/jpeg_progressive.jpg" base.ppm
cjpeg -quality 90 -grayscale -outfile "$out/jpeg_gray.jpg" base.ppm
# Adobe CMYK (APP14 transform 0) and YCCK (transform 2), written with
# libjpeg by cmykjpeg.c below, inverted as Photoshop stores them (which is
# what Go's image/jpeg and FFmpeg assume).
cat >cmykjpeg.c <<'CEOF'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>
/* cmykjpeg IN.ppm OUT.jpg 0|2: naive RGB->CMYK with full black generation. */
int main(int argc, char **argv) {
	FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "wb");
	int w, h, max, x, y;
	if (!in || !out || fscanf(in, "P6 %d %d %d", &w, &h, &max) != 3) return 1;
	fgetc(in);
	unsigned char *rgb = malloc((size_t)w * h * 3), *row = malloc((size_t)w * 4);
	if (fread(rgb, 3, (size_t)w * h, in) != (size_t)w * h) return 1;
	struct jpeg_compress_struct c; struct jpeg_error_mgr e;
	c.err = jpeg_std_error(&e); jpeg_create_compress(&c); jpeg_stdio_dest(&c, out);
	c.image_width = w; c.image_height = h; c.input_components = 4; c.in_color_space = JCS_CMYK;
	jpeg_set_defaults(&c);
	jpeg_set_colorspace(&c, atoi(argv[3]) == 2 ? JCS_YCCK : JCS_CMYK);
	jpeg_set_quality(&c, 95, TRUE);
	for (x = 0; x < c.num_components; x++) c.comp_info[x].h_samp_factor = c.comp_info[x].v_samp_factor = 1;
	jpeg_start_compress(&c, TRUE);
	for (y = 0; y < h; y++) {
		for (x = 0; x < w; x++) {
			int r = rgb[(y*w+x)*3], g = rgb[(y*w+x)*3+1], b = rgb[(y*w+x)*3+2];
			int k = 255 - (r > g ? (r > b ? r : b) : (g > b ? g : b));
			int d = 255 - k;
			int cc = d ? (255 * (d - r) + d/2) / d : 0, m = d ? (255 * (d - g) + d/2) / d : 0, yy = d ? (255 * (d - b) + d/2) / d : 0;
			row[x*4] = 255 - cc; row[x*4+1] = 255 - m; row[x*4+2] = 255 - yy; row[x*4+3] = 255 - k;
		}
		JSAMPROW rp = row; jpeg_write_scanlines(&c, &rp, 1);
	}
	jpeg_finish_compress(&c); fclose(out); return 0;
}
CEOF
cc -O2 -o cmykjpeg cmykjpeg.c -ljpeg
./cmykjpeg base.ppm "$out/jpeg_cmyk.jpg" 0
./cmykjpeg base.ppm "$out/jpeg_ycck.jpg" 2

# PNG: 8-bit RGB, 16-bit RGB, palette, gray, gray 16-bit, RGBA (alpha is a
# diagonal ramp so that colour under transparent pixels is tested).
$IM base.ppm -strip -depth 8 "PNG24:$out/png_rgb.png"
$IM base.ppm -strip -depth 16 "PNG48:$out/png_rgb16.png"
$IM base.ppm -strip -dither None -colors 200 "PNG8:$out/png_palette.png"
$IM base.ppm -strip -colorspace Gray -depth 8 -define png:color-type=0 "PNG:$out/png_gray.png"
$IM base.ppm -strip -colorspace Gray -depth 16 -define png:color-type=0 "PNG:$out/png_gray16.png"
$IM base.ppm -strip \( -size 160x160 gradient:white-black -rotate 45 -gravity center \
	-crop 160x160+0+0 +repage \) -alpha off -compose CopyOpacity -composite \
	-depth 8 "PNG32:$out/png_rgba.png"

# WebP: lossy (VP8), lossless (VP8L), lossy with alpha (VP8X + ALPH).
$IM base.ppm -strip base.png
cwebp -quiet -q 90 base.png -o "$out/webp_lossy.webp"
cwebp -quiet -lossless base.png -o "$out/webp_lossless.webp"
cwebp -quiet -q 90 -exact "$out/png_rgba.png" -o "$out/webp_alpha.webp"

# Benchmark image: ImageNet's typical train JPEG (about 470x390, quality 96,
# 4:4:4 chroma) cut from a real photo.
$IM "$hopper" -strip -gravity center -crop 470x390+0+0 +repage -depth 8 ppm:bench.ppm
cjpeg -quality 96 -sample 1x1 -outfile "$out/bench_470x390_q96_444.jpg" bench.ppm

# Large image (1280x1024, quality 90, 4:2:0) where FFmpeg's lowres applies,
# for the lowres tests and benchmarks.
$IM "$meadow" -strip -depth 8 ppm:large.ppm
cjpeg -quality 90 -sample 2x2 -outfile "$out/large_1280x1024_q90_420.jpg" large.ppm

# Fuzz seed corpus for FuzzDecode (go test fuzz v1 files): tiny real
# images of every kind and a few hostile headers.
$IM base.ppm -resize 8x8! -strip ppm:tiny.ppm
$IM tiny.ppm -strip tiny.png
cjpeg -quality 75 -outfile tiny.jpg tiny.ppm
cjpeg -quality 75 -progressive -outfile tiny_progressive.jpg tiny.ppm
cjpeg -quality 75 -grayscale -outfile tiny_gray.jpg tiny.ppm
./cmykjpeg tiny.ppm tiny_cmyk.jpg 0
$IM tiny.ppm -strip -dither None -colors 4 PNG8:tiny_palette.png
$IM tiny.ppm -strip -depth 16 PNG48:tiny_rgb16.png
cwebp -quiet -q 75 tiny.png -o tiny_lossy.webp
cwebp -quiet -lossless tiny.png -o tiny_lossless.webp
corpus="$out/fuzz/FuzzDecode"
rm -rf "$corpus"
mkdir -p "$corpus"
python3 - "$corpus" tiny.jpg tiny_progressive.jpg tiny_gray.jpg tiny_cmyk.jpg \
	tiny.png tiny_palette.png tiny_rgb16.png tiny_lossy.webp tiny_lossless.webp <<'PYEOF'
import os, struct, sys

def golit(b):
    # A Go interpreted string literal for arbitrary bytes.
    out = []
    for c in b:
        if c == 0x22: out.append('\\"')
        elif c == 0x5c: out.append('\\\\')
        elif 0x20 <= c < 0x7f: out.append(chr(c))
        else: out.append('\\x%02x' % c)
    return '"' + ''.join(out) + '"'

def write(name, b):
    with open(os.path.join(sys.argv[1], name), "w") as f:
        f.write("go test fuzz v1\n[]byte(%s)\n" % golit(b))

for p in sys.argv[2:]:
    write(os.path.splitext(p)[0] + "_" + os.path.splitext(p)[1][1:], open(p, "rb").read())

def seg(m, p): return bytes([0xFF, m]) + struct.pack(">H", len(p) + 2) + p
def sof(w, h): return bytes([8]) + struct.pack(">HH", h, w) + bytes([3, 1, 0x11, 0, 2, 0x11, 1, 3, 0x11, 1])
sos = seg(0xDA, bytes([3, 1, 0, 2, 0x11, 3, 0x11, 0, 63, 0])) + b"\x12\xff\x00\x34"
write("bomb_jpeg", b"\xff\xd8" + seg(0xC0, sof(65535, 65535)) + sos + b"\xff\xd9")
write("bomb_png", b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", 100000, 100000) + bytes([8, 2, 0, 0, 0]) + b"\0\0\0\0")
vp8x = b"VP8X" + struct.pack("<I", 10) + bytes([0, 0, 0, 0]) + struct.pack("<I", 99999)[:3] + struct.pack("<I", 99999)[:3]
write("bomb_webp", b"RIFF" + struct.pack("<I", 4 + len(vp8x)) + b"WEBP" + vp8x)
write("jpeg_no_eoi", b"\xff\xd8" + seg(0xC0, sof(8, 8)) + sos)
write("empty", b"")
PYEOF

ls -l "$out"
du -ch "$out"/*.jpg "$out"/*.png "$out"/*.webp | tail -1
