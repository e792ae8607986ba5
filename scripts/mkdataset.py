#!/usr/bin/python3
"""Make an ImageNet-like dataset of real photographs, reproducibly.

No image dataset can be downloaded on our build machines, but Debian 12's
`main` archive ships real photographs (wallpapers, scikit-image and
matplotlib sample data). This script takes them from the .deb files (no
installation needed), and makes N JPEGs in the ImageFolder layout
(<out>/<class>/<name>.JPEG) with ImageNet's mix:

  * sizes: mostly ~500 px on the long side, aspect ratios 4:3, 3:2, 1:1,
    portrait and a few odd ones (ImageNet's train set averages ~470x390);
  * encodings: ~72% quality 96 with 4:4:4 chroma (as most ImageNet train
    JPEGs are), the rest quality 75-95 4:2:0, ~10% progressive, a few
    grayscale and a few CMYK;
  * a little sensor noise so smooth wallpapers do not compress unrealistically
    small.

With --mix holdout it makes a held-out evaluation set instead, for the
fidelity test against torchvision (decode/fidelity_test.go): ImageNet's
validation sizes (mostly 500x375 and 500x333, both orientations) with more
of the cases that stress geometry and colour: small images whose short side
is under 256 (upscaled by Resize(256)), odd sizes (419x314, 500x281, ...),
large ones (DCT-scaled on the fast path), and more grayscale, CMYK and
4:2:2 JPEGs.

Every choice comes from a seeded RNG per image, so the same (seed, n, mix)
gives the same bytes. Usage:

  scripts/mkdataset.py --out DIR --n 4000 --classes 10 --seed 1 --sources SRCDIR [--mix holdout]

SRCDIR holds the extracted .deb trees (see scripts/dataset.sh, which also
caches the result).
"""
import argparse
import io
import multiprocessing
import os
import random
import sys

import numpy as np
from PIL import Image

# Photographs (not renders) among the files Debian packages ship. Paths are
# relative to the extracted package trees; missing ones are skipped.
SOURCES = [
    "usr/share/backgrounds/mate/nature/Aqua.jpg",
    "usr/share/backgrounds/mate/nature/Blinds.jpg",
    "usr/share/backgrounds/mate/nature/Dune.jpg",
    "usr/share/backgrounds/mate/nature/FreshFlower.jpg",
    "usr/share/backgrounds/mate/nature/Garden.jpg",
    "usr/share/backgrounds/mate/nature/GreenMeadow.jpg",
    "usr/share/backgrounds/mate/nature/LadyBird.jpg",
    "usr/share/backgrounds/mate/nature/RainDrops.jpg",
    "usr/share/backgrounds/mate/nature/Storm.jpg",
    "usr/share/backgrounds/mate/nature/TwoWings.jpg",
    "usr/share/backgrounds/mate/nature/Wood.jpg",
    "usr/share/backgrounds/mate/nature/YellowFlower.jpg",
    "usr/share/backgrounds/mate/abstract/Elephants.jpg",
    "usr/share/wallpapers/Autumn/contents/images/1920x1080.jpg",
    "usr/share/wallpapers/BytheWater/contents/images/1920x1080.jpg",
    "usr/share/wallpapers/ColdRipple/contents/images/1920x1080.jpg",
    "usr/share/wallpapers/ColorfulCups/contents/images/1920x1080.jpg",
    "usr/share/wallpapers/DarkestHour/contents/images/1920x1080.jpg",
    "usr/share/wallpapers/EveningGlow/contents/images/1920x1080.jpg",
    "usr/share/wallpapers/FallenLeaf/contents/images/1920x1080.jpg",
    "usr/share/wallpapers/Grey/contents/images/1920x1080.jpg",
    "usr/share/wallpapers/Kite/contents/images/1920x1080.jpg",
    "usr/share/wallpapers/OneStandsOut/contents/images/1920x1080.jpg",
    "usr/share/wallpapers/Path/contents/images/1920x1080.jpg",
    "usr/share/wallpapers/SafeLanding/contents/images/1920x1080.jpg",
    "usr/share/wallpapers/summer_1am/contents/images/1920x1080.jpg",
    "usr/lib/python3/dist-packages/skimage/data/astronaut.png",
    "usr/lib/python3/dist-packages/skimage/data/chelsea.png",
    "usr/lib/python3/dist-packages/skimage/data/coffee.png",
    "usr/lib/python3/dist-packages/skimage/data/rocket.jpg",
    "usr/lib/python3/dist-packages/skimage/data/motorcycle_left.png",
    "usr/lib/python3/dist-packages/skimage/data/hubble_deep_field.jpg",
    "usr/lib/python3/dist-packages/skimage/data/retina.jpg",
    "usr/lib/python3/dist-packages/skimage/data/grass.png",
    "usr/lib/python3/dist-packages/skimage/data/gravel.png",
    "usr/lib/python3/dist-packages/skimage/data/brick.png",
    "usr/lib/python3/dist-packages/skimage/data/coins.png",
    "usr/lib/python3/dist-packages/sklearn/datasets/images/china.jpg",
    "usr/lib/python3/dist-packages/sklearn/datasets/images/flower.jpg",
    "usr/share/matplotlib/mpl-data/sample_data/grace_hopper.jpg",
]

# (weight, width/height) — ImageNet is mostly landscape 4:3 and 3:2.
ASPECTS = [(45, 4 / 3), (18, 3 / 2), (6, 1.0), (12, 3 / 4), (6, 2 / 3), (5, 16 / 9), (8, None)]

# Held-out sizes (--mix holdout): (weight, kind) where kind is a fixed
# (w, h), or a generator name handled by holdout_size.
ODD_SIZES = [(419, 314), (500, 281), (281, 500), (500, 334), (334, 500), (257, 256), (383, 255),
             (500, 357), (448, 299), (301, 223), (500, 375), (375, 500)]
HOLDOUT_SIZES = [(40, "4:3"), (12, "3:2"), (5, "1:1"), (12, "odd"), (15, "small"), (8, "large"), (8, "any")]

# Encodings: (cumulative share, kind). The train mix is ImageNet's; the
# held-out one has more of the rarer kinds.
IMAGENET_ENCODINGS = [(0.72, "444"), (0.82, "progressive"), (0.95, "420"), (0.98, "gray"), (1.0, "cmyk")]
HOLDOUT_ENCODINGS = [(0.45, "444"), (0.57, "progressive"), (0.70, "420"), (0.78, "422"), (0.90, "gray"),
                     (0.95, "cmyk"), (1.0, "cmyk-k")]

_photos = None


def load_sources(srcdir):
    photos = []
    for rel in SOURCES:
        path = os.path.join(srcdir, rel)
        if not os.path.exists(path):
            continue
        im = Image.open(path)
        im = im.convert("RGB")
        # Cap the working size: crops are rescaled to ~500 px anyway.
        im.thumbnail((1600, 1600), Image.BILINEAR)
        photos.append(im)
    return photos


def init_worker(srcdir):
    global _photos
    _photos = load_sources(srcdir)


def pick(rng, table):
    total = sum(w for w, _ in table)
    x = rng.uniform(0, total)
    for w, v in table:
        x -= w
        if x <= 0:
            return v
    return table[-1][1]


def imagenet_size(rng):
    aspect = pick(rng, ASPECTS)
    if aspect is None:
        aspect = rng.uniform(0.5, 2.2)
    long_side = 500 if rng.random() < 0.7 else rng.randint(280, 800)
    if aspect >= 1:
        return long_side, max(64, round(long_side / aspect))
    return max(64, round(long_side * aspect)), long_side


def holdout_size(rng):
    kind = pick(rng, HOLDOUT_SIZES)
    portrait = rng.random() < 0.25
    if kind == "odd":
        return rng.choice(ODD_SIZES)
    if kind == "small":
        # Short side 60-255: Resize(256) upscales these.
        short = rng.randint(60, 255)
        w, h = round(short * rng.choice([1.0, 4 / 3, 3 / 2, 1.25, rng.uniform(1, 2)])), short
    elif kind == "large":
        long_side = rng.randint(600, 1600)
        w, h = long_side, round(long_side / rng.choice([4 / 3, 3 / 2, 16 / 9]))
    elif kind == "any":
        long_side = rng.randint(280, 520)
        w, h = long_side, max(64, round(long_side / rng.uniform(1, 2.2)))
    else:
        a = {"4:3": 4 / 3, "3:2": 3 / 2, "1:1": 1.0}[kind]
        w, h = 500, round(500 / a)
    return (h, w) if portrait else (w, h)


def pick_encoding(r, table):
    for upto, kind in table:
        if r < upto:
            return kind
    return table[-1][1]


def make_one(args):
    i, seed, classes, out, mix = args
    rng = random.Random(seed * 1_000_003 + i)
    src_idx = rng.randrange(len(_photos))
    photo = _photos[src_idx]
    w, h = holdout_size(rng) if mix == "holdout" else imagenet_size(rng)
    # A random crop of the source with the target aspect, 25-100% of the
    # largest such crop, then a resize to (w, h).
    W, H = photo.size
    cw = min(W, round(H * w / h))
    ch = min(H, round(W * h / w))
    f = rng.uniform(0.5, 1.0)
    cw, ch = max(16, round(cw * f)), max(16, round(ch * f))
    x0, y0 = rng.randint(0, W - cw), rng.randint(0, H - ch)
    im = photo.crop((x0, y0, x0 + cw, y0 + ch)).resize((w, h), Image.BILINEAR)
    if rng.random() < 0.5:
        im = im.transpose(Image.FLIP_LEFT_RIGHT)
    arr = np.asarray(im, dtype=np.int16)
    noise = np.random.default_rng(seed * 7919 + i).normal(0, 3.2, arr.shape)
    im = Image.fromarray(np.clip(arr + noise, 0, 255).astype(np.uint8))

    kind = pick_encoding(rng.random(), HOLDOUT_ENCODINGS if mix == "holdout" else IMAGENET_ENCODINGS)
    kw = dict(format="JPEG")
    if kind == "444":
        kw.update(quality=96, subsampling=0)
    elif kind == "progressive":
        kw.update(quality=rng.randint(85, 95), subsampling=2, progressive=True)
    elif kind == "420":
        kw.update(quality=rng.randint(75, 95), subsampling=2)
    elif kind == "422":
        kw.update(quality=rng.randint(80, 95), subsampling=1)
    elif kind == "gray":
        im = im.convert("L")
        kw.update(quality=90)
    elif kind == "cmyk-k":
        # PIL's convert("CMYK") leaves K at 0; print workflows put the
        # grey component in K (grey component replacement, 80% here).
        a = np.asarray(im, dtype=np.float64) / 255
        k = (1 - a.max(axis=2, keepdims=True)) * 0.8
        cmy = (1 - a - k) / np.maximum(1 - k, 1e-6)
        cmyk = np.concatenate([cmy, k], axis=2)
        im = Image.fromarray(np.clip(np.round(cmyk * 255), 0, 255).astype(np.uint8), "CMYK")
        kw.update(quality=90)
    else:
        im = im.convert("CMYK")
        kw.update(quality=90)
    label = src_idx % classes
    cls = "class_%02d" % label
    buf = io.BytesIO()
    im.save(buf, **kw)
    path = os.path.join(out, cls, "img_%06d.JPEG" % i)
    with open(path, "wb") as fh:
        fh.write(buf.getvalue())
    return len(buf.getvalue()), w, h


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sources", required=True)
    ap.add_argument("--mix", choices=["imagenet", "holdout"], default="imagenet")
    a = ap.parse_args()
    photos = load_sources(a.sources)
    if len(photos) < 10:
        sys.exit("mkdataset: found only %d source photographs under %s" % (len(photos), a.sources))
    classes = min(a.classes, len(photos))
    for c in range(classes):
        os.makedirs(os.path.join(a.out, "class_%02d" % c), exist_ok=True)
    jobs = [(i, a.seed, classes, a.out, a.mix) for i in range(a.n)]
    with multiprocessing.Pool(os.cpu_count(), initializer=init_worker, initargs=(a.sources,)) as pool:
        stats = pool.map(make_one, jobs, chunksize=32)
    size = sum(s for s, _, _ in stats)
    mw = sum(w for _, w, _ in stats) / len(stats)
    mh = sum(h for _, _, h in stats) / len(stats)
    print("mkdataset: %d images from %d photographs, %d classes, mean %.0fx%.0f, mean %.0f KB, %.1f MB in all -> %s"
          % (a.n, len(photos), classes, mw, mh, size / len(stats) / 1024, size / 1e6, a.out))


if __name__ == "__main__":
    main()
