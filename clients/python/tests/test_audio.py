"""Audio through the product binary and the Python client: longshore-node
--standalone --media audio --sink feed serves float32 [N,C,S] batches; in
evaluation each is the centered window of ffmpeg's own decode and
resampling of the clip (`ffmpeg -ar R -ac C -f f32le`), within 1e-5, and
the clips shorter than the window are zero-padded and marked short."""

import os
import shutil
import subprocess

import numpy as np
import torch  # noqa: F401  (Batch.tensor)

import longshore
from limits import HANG_S

HERE = os.path.dirname(os.path.abspath(__file__))
MEDIA = os.path.join(HERE, "..", "..", "..", "testdata", "media")
CLIPS = {"speech": ["speech.wav", "speech.flac", "speech.mp3", "speech.opus", "speech.ogg"],
         "tone": ["tone.wav", "tone.flac", "tone.mp3", "tone.opus", "tone.ogg", "short.flac", "short.wav"]}
RATE, CHANNELS, SECONDS = 16000, 2, 0.75


def ffmpeg_window(path):
    """ffmpeg's resampled PCM of path, the centered window of it, [C,S]
    zero-padded, and whether it was short."""
    raw = subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-i", path, "-vn",
                          "-ar", str(RATE), "-ac", str(CHANNELS), "-f", "f32le", "-"],
                         check=True, capture_output=True).stdout
    pcm = np.frombuffer(raw, dtype="<f4").reshape(-1, CHANNELS).T  # [C, total]
    n = int(round(SECONDS * RATE))
    total = pcm.shape[1]
    out = np.zeros((CHANNELS, n), dtype=np.float32)
    if total < n:
        out[:, :total] = pcm
        return out, True
    start = (total - n) // 2
    return pcm[:, start:start + n], False


def test_audio_feed_matches_ffmpeg(start_node, tmp_path):
    root = tmp_path / "ds"
    for cls, names in CLIPS.items():
        (root / cls).mkdir(parents=True)
        for n in names:
            shutil.copy(os.path.join(MEDIA, n), root / cls / n)
    feed = str(tmp_path / "feed")
    node = start_node(["--dataset", root, "--media", "audio", "--sample-rate", RATE, "--channels", CHANNELS,
                       "--audio-seconds", SECONDS, "--transform", "eval", "--batch-size", 4,
                       "--progress", "never"], feed)
    sock = node.socket()
    loader = longshore.Loader(sock, timeout=HANG_S)
    spec = loader.welcome["spec"]
    n = int(round(SECONDS * RATE))
    assert spec == {"kind": "audio", "dtype": "float32", "shape": [CHANNELS, n], "layout": "NCS"}
    seen = {}
    for b in loader.batches():
        assert b.images.dtype == np.float32 and b.images.shape == (len(b), CHANNELS, n)
        assert b.images.base is not None  # a view of the shared memory, not a copy
        t = b.tensor()
        assert t.dtype == torch.float32 and t.data_ptr() == b.images.ctypes.data
        for i, key in enumerate(b.keys):
            want, short = ffmpeg_window(str(root / key))
            diff = float(np.abs(b.images[i] - want).max())
            assert diff <= 1e-5, f"{key}: max difference {diff} from ffmpeg's resampling"
            assert b.short[i] == short, f"{key}: short {b.short[i]}, want {short}"
            seen[key] = b.short[i]
        del t
        b.release()
    loader.close()
    assert node.wait() == 0, node.stderr
    assert len(seen) == 12
    assert sorted(k for k, s in seen.items() if s) == ["tone/short.flac", "tone/short.wav"]
