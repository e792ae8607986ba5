"""Video through the product binary and the Python client: longshore-node
--standalone --media video --sink feed serves uint8 [N,T,3,H,W] clips
(NTCHW) over shared memory; in evaluation with uniform sampling each
frame is the one displayed at the center of its part of the clip, read
back from the frame counter drawn into the test clips
(scripts/mkmedia.sh), for constant and variable frame rate."""

import os
import shutil
import subprocess

import numpy as np

import longshore
from limits import HANG_S

HERE = os.path.dirname(os.path.abspath(__file__))
MEDIA = os.path.join(HERE, "..", "..", "..", "testdata", "media")
T, SIZE = 8, 64


def frame_pts(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v", "-show_entries",
                          "stream=time_base,duration:format=duration:frame=best_effort_timestamp", "-of", "json", path],
                         check=True, capture_output=True, text=True).stdout
    import json

    j = json.loads(out)
    pts = sorted(int(f["best_effort_timestamp"]) for f in j["frames"])
    num, den = map(int, j["streams"][0]["time_base"].split("/"))
    dur = j["streams"][0].get("duration") or j["format"]["duration"]
    return pts, round(float(dur) * den / num)


def counter(frame):
    """The drawn index of a [3,H,W] frame made from 160x128 (scaled by
    SIZE/128, center crop)."""
    s = SIZE / 128
    ox = int(np.floor(0.5 * (round(160 * s) - SIZE) + 0.5))
    y = int(4 * s)
    n = 0
    for b in range(8):
        x = int((40 + 10 * b + 5) * s) - ox
        if frame[:, y, x].astype(int).mean() > 128:
            n |= 1 << b
    return n


def test_video_feed_frames(start_node, tmp_path):
    root = tmp_path / "ds" / "a"
    root.mkdir(parents=True)
    names = ["cfr_h264.mp4", "vfr_h264.mkv", "vp9.webm"]
    for n in names:
        shutil.copy(os.path.join(MEDIA, n), root / n)
    feed = str(tmp_path / "feed")
    node = start_node(["--dataset", tmp_path / "ds", "--media", "video", "--clip-frames", T,
                       "--clip-sampling", "uniform", "--size", SIZE, "--transform", "eval", "--batch-size", 2,
                       "--progress", "never"], feed)
    sock = node.socket()
    loader = longshore.Loader(sock, timeout=HANG_S)
    assert loader.welcome["spec"] == {"kind": "video", "dtype": "uint8", "shape": [T, 3, SIZE, SIZE], "layout": "NTCHW"}
    seen = set()
    for b in loader.batches():
        assert b.images.dtype == np.uint8 and b.images.shape == (len(b), T, 3, SIZE, SIZE)
        for i, key in enumerate(b.keys):
            pts, dur = frame_pts(str(tmp_path / "ds" / key))
            want = []
            for k in range(T):
                ts = (2 * k + 1) * dur // (2 * T)
                want.append(max(j for j, p in enumerate(pts) if p <= ts))
            got = [counter(b.images[i, k]) for k in range(T)]
            assert got == want, f"{key}: frames {got}, want {want}"
            assert not b.short[i]
            seen.add(key)
        b.release()
    loader.close()
    assert node.wait() == 0, node.stderr
    assert seen == {"a/" + n for n in names}
