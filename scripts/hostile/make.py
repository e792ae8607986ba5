#!/usr/bin/python3
"""Regenerates testdata/hostile/: small legal images of every variant the
decoder meets, small hostile ones, and malformed manifests. The large
cases (a PNG whose IDAT inflates to gigabytes, an image at the pixel
limit, an object over --max-object-bytes) are made by the Go tests
themselves (decode/hostile_test.go) and never committed.

Needs /usr/bin/python3 with PIL and numpy, and cc with libjpeg (the
libjpeg-turbo headers the decoder builds against) for jpegs.c, which
writes what PIL cannot: an arithmetic-coded JPEG and a progressive JPEG
of 2,080 scans. The 12-bit JPEG and the interlaced PNG are written by
hand below. Run from anywhere:

    scripts/hostile/make.py

Outputs are deterministic for a given PIL/libjpeg (seeded noise); the
tests check outcomes (decoded like PIL within a tolerance, or the right
failure class), not bytes.
"""
import io
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(REPO, "testdata", "hostile")
IMAGES = os.path.join(OUT, "images")
MANIFESTS = os.path.join(OUT, "manifests")
SIDE = 64


def photo(side=SIDE, seed=1):
    """A small synthetic photo: gradients, discs and noise, so every
    codec has texture and edges to get wrong."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:side, 0:side].astype(np.float64)
    r = 128 + 100 * np.sin(x / 7.0) * np.cos(y / 11.0)
    g = 255 * x / side
    b = 255 * y / side
    img = np.stack([r, g, b], -1)
    for cx, cy, rad, col in [(20, 22, 9, (250, 30, 40)), (44, 40, 12, (20, 200, 60)), (50, 12, 6, (30, 40, 230))]:
        m = (x - cx) ** 2 + (y - cy) ** 2 < rad * rad
        img[m] = col
    img += rng.normal(0, 6, img.shape)
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def put(rel, data):
    path = os.path.join(IMAGES, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return data


def saved(img, fmt, **kw):
    b = io.BytesIO()
    img.save(b, fmt, **kw)
    return b.getvalue()


def strip_app14(jpeg):
    """Removes the Adobe APP14 segment (which says CMYK or YCCK)."""
    out, i = bytearray(jpeg[:2]), 2
    while i < len(jpeg):
        assert jpeg[i] == 0xFF
        m = jpeg[i + 1]
        if m == 0xDA:
            out += jpeg[i:]
            break
        n = struct.unpack(">H", jpeg[i + 2:i + 4])[0]
        if m != 0xEE:
            out += jpeg[i:i + 2 + n]
        i += 2 + n
    return bytes(out)


def set_sof_size(jpeg, w, h):
    b = bytearray(jpeg)
    i = 2
    while i < len(b):
        m = b[i + 1]
        n = struct.unpack(">H", b[i + 2:i + 4])[0]
        if 0xC0 <= m <= 0xC2:
            struct.pack_into(">HH", b, i + 5, h, w)
            return bytes(b)
        i += 2 + n
    raise ValueError("no SOF")


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_interlaced(img):
    """An Adam7-interlaced 8-bit RGB PNG (PIL writes only progressive
    order), unfiltered."""
    a = np.asarray(img.convert("RGB"))
    h, w, _ = a.shape
    raw = bytearray()
    for x0, y0, dx, dy in [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]:
        sub = a[y0::dy, x0::dx]
        if sub.size == 0:
            continue
        for row in sub:
            raw += b"\x00" + row.tobytes()
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 1)
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + png_chunk(b"IEND", b"")


def set_png_size(png, w, h):
    b = bytearray(png)
    struct.pack_into(">II", b, 16, w, h)
    struct.pack_into(">I", b, 29, zlib.crc32(bytes(b[12:29])) & 0xFFFFFFFF)
    return bytes(b)


def jpeg12(side=SIDE):
    """A 12-bit grayscale JPEG (SOF1, Huffman), written by hand: each 8x8
    block is flat at level v(bx, by) = 256 + 448*bx + 64*by (of 4095),
    with a quantisation table of ones, so the decoded image is exactly
    those levels. PIL cannot read 12-bit JPEGs."""
    out = bytearray(b"\xff\xd8")
    seg = lambda m, body: out.extend(b"\xff" + bytes([m]) + struct.pack(">H", len(body) + 2) + body)
    seg(0xDB, bytes([0x10]) + struct.pack(">64H", *([1] * 64)))  # 16-bit table 0, all ones
    seg(0xC1, struct.pack(">BHHB", 12, side, side, 1) + bytes([1, 0x11, 0]))
    # DC table 0: categories 0..15, five-bit codes 00000..01111.
    bits = [0] * 16
    bits[4] = 16
    seg(0xC4, bytes([0x00]) + bytes(bits) + bytes(range(16)))
    # AC table 0: only EOB, code "0".
    bits = [0] * 16
    bits[0] = 1
    seg(0xC4, bytes([0x10]) + bytes(bits) + bytes([0x00]))
    seg(0xDA, bytes([1, 1, 0x00, 0, 63, 0]))
    acc, nbits, data = 0, 0, bytearray()

    def emit(v, n):
        nonlocal acc, nbits
        for i in range(n - 1, -1, -1):
            acc = (acc << 1) | ((v >> i) & 1)
            nbits += 1
            if nbits == 8:
                data.append(acc)
                if acc == 0xFF:
                    data.append(0)
                acc, nbits = 0, 0

    prev = 0
    for by in range(side // 8):
        for bx in range(side // 8):
            v = 256 + 448 * bx + 64 * by
            dc = 8 * (v - 2048)
            diff = dc - prev
            prev = dc
            c = abs(diff).bit_length()
            emit(c, 5)
            if c:
                emit(diff if diff > 0 else diff + (1 << c) - 1, c)
            emit(0, 1)  # EOB
    while nbits:
        emit(1, 1)
    out += data + b"\xff\xd9"
    return bytes(out)


def exif_orientation(img, n):
    ex = Image.Exif()
    ex[0x0112] = n
    return saved(img, "JPEG", quality=90, exif=ex.tobytes())


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(IMAGES)
    os.makedirs(MANIFESTS)
    base = photo()
    tmp = tempfile.mkdtemp()
    try:
        ppm = os.path.join(tmp, "base.ppm")
        base.save(ppm)
        jpegs = os.path.join(tmp, "jpegs")
        subprocess.run(["cc", "-O2", "-o", jpegs, os.path.join(HERE, "jpegs.c"), "-ljpeg"], check=True)
        for mode in ["arith", "scans"]:
            dst = os.path.join(tmp, mode + ".jpg")
            subprocess.run([jpegs, mode, ppm, dst], check=True)
            put({"arith": "legal/jpeg_arithmetic.jpg", "scans": "legal/jpeg_progressive_2080_scans.jpg"}[mode], open(dst, "rb").read())
    finally:
        shutil.rmtree(tmp)

    # Legal: decoded and compared with PIL.
    j444 = put("legal/jpeg_baseline_444.jpg", saved(base, "JPEG", quality=92, subsampling=0))
    put("legal/jpeg_baseline_420.jpg", saved(base, "JPEG", quality=90, subsampling=2))
    put("legal/jpeg_progressive.jpg", saved(base, "JPEG", quality=90, progressive=True))
    put("legal/jpeg_gray.jpg", saved(base.convert("L"), "JPEG", quality=90))
    put("legal/jpeg_restart_markers.jpg", saved(base, "JPEG", quality=90, restart_marker_blocks=1))
    cmyk = put("legal/jpeg_cmyk_adobe.jpg", saved(base.convert("CMYK"), "JPEG", quality=92))
    put("legal/jpeg_cmyk_no_adobe.jpg", strip_app14(cmyk))
    ycck = open(os.path.join(REPO, "decode", "testdata", "jpeg_ycck.jpg"), "rb").read()
    put("legal/jpeg_ycck_adobe.jpg", ycck)
    put("legal/jpeg_ycck_no_adobe.jpg", strip_app14(ycck))
    put("legal/jpeg_12bit_gray.jpg", jpeg12())
    for n in range(1, 9):
        put("legal/jpeg_exif_orientation_%d.jpg" % n, exif_orientation(base, n))
    put("legal/png_rgb.png", saved(base, "PNG"))
    put("legal/png_rgba.png", saved(base.convert("RGBA"), "PNG"))
    a16 = (np.asarray(base).astype(np.uint16) * 257)
    put("legal/png_rgb16.png", png_rgb16(a16))
    put("legal/png_gray16.png", saved(Image.fromarray((np.asarray(base.convert("L")).astype(np.uint16) * 257), "I;16"), "PNG"))
    put("legal/png_palette.png", saved(base.quantize(16), "PNG"))
    put("legal/png_gray_alpha.png", saved(base.convert("LA"), "PNG"))
    put("legal/png_interlaced.png", png_interlaced(base))
    put("legal/webp_lossy.webp", saved(base, "WEBP", quality=90))
    put("legal/webp_lossless.webp", saved(base, "WEBP", lossless=True))
    put("legal/webp_alpha.webp", saved(base.convert("RGBA"), "WEBP", quality=90))
    frames = [base, base.rotate(90), base.rotate(180)]
    put("legal/webp_animated.webp", saved(frames[0], "WEBP", save_all=True, append_images=frames[1:], duration=100, loop=0))
    png = saved(base, "PNG")
    put("legal/png_named.jpg", png)
    put("legal/jpeg_named.png", j444)
    put("odd keys/a file with spaces.jpg", j444)
    put("odd keys/日本語のファイル.png", png)
    put("odd keys/ÿ ümlaut.webp", saved(base, "WEBP", quality=90))

    # Hostile: each a per-sample failure of a known class.
    put("bad/empty.jpg", b"")
    put("bad/empty.png", b"")
    rng = np.random.default_rng(7)
    for ext in ["jpg", "png", "webp"]:
        put("bad/random.%s" % ext, rng.integers(0, 256, 4096, dtype=np.uint8).tobytes())
    put("bad/text.jpg", b"this is not an image\n")
    webp = saved(base, "WEBP", quality=90)
    for name, data in [("jpeg", j444), ("png", png), ("webp", webp)]:
        ext = {"jpeg": "jpg", "png": "png", "webp": "webp"}[name]
        for where, cut in [("header", 20), ("middle", len(data) // 2), ("before_end", len(data) - 2)]:
            put("bad/truncated_%s_%s.%s" % (name, where, ext), data[:cut])
    put("bad/jpeg_header_60000x60000.jpg", set_sof_size(j444, 60000, 60000))
    put("bad/png_header_100000x100000.png", set_png_size(png, 100000, 100000))
    bad_crc = bytearray(png)
    bad_crc[len(png) // 2] ^= 0xFF
    put("bad/png_idat_crc.png", bytes(bad_crc))

    # Manifests: each refused at start with the line, or read as said.
    m = {
        "ok_bom_crlf.csv": "\ufeffkey,label\r\nlegal/png_rgb.png,0\r\nlegal/jpeg_gray.jpg,1\r\n",
        "ok_odd_keys.jsonl": '{"key": "odd keys/a file with spaces.jpg", "label": 0}\n{"key": "odd keys/日本語のファイル.png", "label": 1}\n',
        "bad_line.csv": "legal/png_rgb.png,0\nlegal/jpeg_gray.jpg,1,extra\n",
        "missing_label.csv": "legal/png_rgb.png,0\nlegal/jpeg_gray.jpg\n",
        "missing_label.jsonl": '{"key": "legal/png_rgb.png", "label": 0}\n{"key": "legal/jpeg_gray.jpg"}\n',
        "duplicate_key.csv": "legal/png_rgb.png,0\nlegal/jpeg_gray.jpg,1\nlegal/png_rgb.png,1\n",
        "label_out_of_range.csv": "legal/png_rgb.png,0\nlegal/jpeg_gray.jpg,99999999999\n",
        "negative_label.csv": "legal/png_rgb.png,-1\n",
        "dotdot_key.csv": "legal/png_rgb.png,0\n../escape.jpg,1\n",
        "leading_slash_key.csv": "/etc/passwd,0\n",
        "bad_json.jsonl": '{"key": "legal/png_rgb.png", "label": 0}\n{"key": \n',
        "empty.csv": "",
    }
    for name, text in m.items():
        with open(os.path.join(MANIFESTS, name), "w", encoding="utf-8", newline="") as f:
            f.write(text)
    n = sum(len(fs) for _, _, fs in os.walk(OUT))
    print("wrote %d files under %s" % (n, OUT), file=sys.stderr)


def png_rgb16(a):
    """A 16-bit RGB PNG (PIL writes 16 bits only for grey)."""
    h, w, _ = a.shape
    raw = b"".join(b"\x00" + row.astype(">u2").tobytes() for row in a)
    ihdr = struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(raw, 9)) + png_chunk(b"IEND", b"")


if __name__ == "__main__":
    main()
