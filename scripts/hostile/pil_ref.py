#!/usr/bin/python3
"""PIL's decoding of image files, for decode/hostile_test.go to compare
with: for each file, Image.open(f).convert("RGB") (what torchvision's
ImageFolder loader does; no EXIF transpose, the first frame of an
animation) written as raw RGB to OUT/<i>.rgb, and OUT/index.json:
[{"file": f, "ok": true, "width": w, "height": h, "mode": "RGB", "frames": n}
 or {"file": f, "ok": false, "error": "..."}].

16-bit greyscale ("I;16") is taken as its top 8 bits: PIL's own
conversion to RGB clips at 255 instead, which no one wants.

Usage: scripts/hostile/pil_ref.py OUT FILE...
"""
import json
import os
import sys

import numpy as np
from PIL import Image


def main():
    out, files = sys.argv[1], sys.argv[2:]
    index = []
    for i, f in enumerate(files):
        try:
            with Image.open(f) as img:
                img.load()
                frames = getattr(img, "n_frames", 1)
                mode = img.mode
                if mode in ("I;16", "I;16B", "I"):
                    a = (np.asarray(img).astype(np.uint32) >> 8).astype(np.uint8)
                    rgb = np.stack([a, a, a], -1)
                else:
                    rgb = np.asarray(img.convert("RGB"))
            with open(os.path.join(out, "%d.rgb" % i), "wb") as fh:
                fh.write(rgb.tobytes())
            index.append({"file": f, "ok": True, "width": rgb.shape[1], "height": rgb.shape[0], "mode": mode, "frames": frames})
        except Exception as e:  # noqa: BLE001 - any failure is the answer
            index.append({"file": f, "ok": False, "error": "%s: %s" % (type(e).__name__, e)})
    with open(os.path.join(out, "index.json"), "w") as fh:
        json.dump(index, fh)


if __name__ == "__main__":
    main()
