#!/usr/bin/python3
"""torchvision's own output, for decode/fidelity_test.go to compare with.

Reads a job (JSON) and writes, into --out:

  eval.u8    for every file, transforms.Resize(resize) + CenterCrop(size) +
             PILToTensor of Image.open(f).convert("RGB") (what ImageFolder's
             loader gives): uint8 C×H×W, files one after another
  train.u8   for every file with a box [top, left, h, w, flip]:
             F.resized_crop(img, top, left, h, w, [size, size]), then
             F.hflip if flip, then PILToTensor; files without a box (null)
             are left out
  trainv.u8  the same for every box of job.trainv, [top, left, h, w, hflip,
             vflip], then F.vflip if vflip (when trainv is given)
  evalflip.u8, resizeflip.u8  for every [hflip, vflip] of job.flips (when
             given): Resize(resize) + CenterCrop(size), and Resize((size,
             size)), each then F.hflip if hflip and F.vflip if vflip
             (RandomHorizontalFlip and RandomVerticalFlip after them)
  eval.f16, eval.bf16  when job.normalize {"mean": [...], "std": [...]}
             is given: the Eval transform as ToTensor + Normalize(mean, std),
             cast to float16 and to bfloat16, the bits as int16 C×H×W
  kinds.json ["444", "420", "422", "gray", "cmyk", ...] per file (JPEG
             chroma layout or colour space, "+progressive" when so)
  params.json  {"boxes": [[[top, left, h, w], ...] per size], "flips": n}:
             RandomResizedCrop.get_params(img, scale, ratio) drawn n times
             for each [width, height] in params.sizes, and how many of
             n draws of RandomHorizontalFlip flipped, after
             torch.manual_seed(params.seed)

Job: {"files": [...], "size": 224, "resize": 256, "train": [...],
      "trainv": [...], "flips": [[hflip, vflip], ...], "normalize": {"mean": [...], "std": [...]},
      "params": {"sizes": [[w, h], ...], "n": 20000, "seed": 1,
                 "scale": [0.08, 1.0], "ratio": [0.75, 1.3333333333333333]}}

Needs python3-torch, python3-torchvision and python3-pil (scripts/deps.sh
python). Usage: scripts/torchvision_ref.py --job JOB.json --out DIR
"""
import argparse
import json
import os

import torch
import torchvision
from PIL import Image
from torchvision import transforms as T
from torchvision.transforms import functional as F


def load(path):
    with open(path, "rb") as fh:
        img = Image.open(fh)
        return img.convert("RGB"), kind(img)


def kind(img):
    if img.mode == "L":
        k = "gray"
    elif img.mode == "CMYK":
        k = "cmyk"
    else:
        # Pillow's JPEG plugin: (id, h, v, table) per component.
        h, v = img.layer[0][1:3] if getattr(img, "layer", None) else (1, 1)
        k = {(1, 1): "444", (2, 1): "422", (2, 2): "420"}.get((h, v), "%dx%d" % (h, v))
    if img.info.get("progressive"):
        k += "+progressive"
    return k


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--job", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    with open(a.job) as fh:
        job = json.load(fh)
    size = job.get("size", 224)
    evaluate = T.Compose([T.Resize(job.get("resize", 256)), T.CenterCrop(size), T.PILToTensor()])
    to_tensor = T.PILToTensor()
    train = job.get("train") or [None] * len(job["files"])
    kinds = []
    with open(os.path.join(a.out, "eval.u8"), "wb") as ev, open(os.path.join(a.out, "train.u8"), "wb") as tr:
        for path, box in zip(job["files"], train):
            img, k = load(path)
            kinds.append(k)
            ev.write(evaluate(img).contiguous().numpy().tobytes())
            if box is not None:
                top, left, h, w, flip = box
                out = F.resized_crop(img, top, left, h, w, [size, size])
                if flip:
                    out = F.hflip(out)
                tr.write(to_tensor(out).contiguous().numpy().tobytes())
    trainv = job.get("trainv")
    if trainv:
        with open(os.path.join(a.out, "trainv.u8"), "wb") as tv:
            for path, box in zip(job["files"], trainv):
                img, _ = load(path)
                top, left, h, w, flip, vflip = box
                out = F.resized_crop(img, top, left, h, w, [size, size])
                if flip:
                    out = F.hflip(out)
                if vflip:
                    out = F.vflip(out)
                tv.write(to_tensor(out).contiguous().numpy().tobytes())
    flips = job.get("flips")
    if flips:
        geometries = {"evalflip": T.Compose([T.Resize(job.get("resize", 256)), T.CenterCrop(size)]),
                      "resizeflip": T.Resize((size, size))}
        for name, geometry in geometries.items():
            with open(os.path.join(a.out, name + ".u8"), "wb") as fh:
                for path, (hflip, vflip) in zip(job["files"], flips):
                    img, _ = load(path)
                    out = geometry(img)
                    if hflip:
                        out = F.hflip(out)
                    if vflip:
                        out = F.vflip(out)
                    fh.write(to_tensor(out).contiguous().numpy().tobytes())
    norm = job.get("normalize")
    if norm:
        floats = T.Compose([T.Resize(job.get("resize", 256)), T.CenterCrop(size), T.ToTensor(),
                            T.Normalize(norm["mean"], norm["std"])])
        with open(os.path.join(a.out, "eval.f16"), "wb") as f16, open(os.path.join(a.out, "eval.bf16"), "wb") as bf16:
            for path in job["files"]:
                img, _ = load(path)
                x = floats(img)
                f16.write(x.to(torch.float16).view(torch.int16).contiguous().numpy().tobytes())
                bf16.write(x.to(torch.bfloat16).view(torch.int16).contiguous().numpy().tobytes())
    with open(os.path.join(a.out, "kinds.json"), "w") as fh:
        json.dump(kinds, fh)
    p = job.get("params")
    if p:
        torch.manual_seed(p["seed"])
        boxes = []
        for w, h in p["sizes"]:
            img = torch.empty((1, h, w), dtype=torch.uint8)
            boxes.append([list(T.RandomResizedCrop.get_params(img, p["scale"], p["ratio"])) for _ in range(p["n"])])
        # RandomHorizontalFlip.forward: flip when torch.rand(1) < p.
        flips = sum(int(torch.rand(1) < 0.5) for _ in range(p["n"]))
        with open(os.path.join(a.out, "params.json"), "w") as fh:
            json.dump({"boxes": boxes, "flips": flips, "torchvision": torchvision.__version__}, fh)


if __name__ == "__main__":
    main()
