"""examples/feed_server over the tiny dataset (conftest.tiny_dataset),
started without waiting for it: for tests of launch order and of what a
trainer sees at connection."""

import signal
import subprocess

from limits import HANG_S


def launch(server_bin, dataset, feed_dir, ranks=1, batch_size=8, epochs=1):
    """A feed_server serving `ranks` ranks in feed_dir; no waiting."""
    cmd = [server_bin, "--dataset", dataset, "--dir", feed_dir, "--ranks", str(ranks), "--batch-size",
           str(batch_size), "--size", "16", "--transform", "resize", "--epochs", str(epochs), "--slots", "2",
           "--decoders", "1"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(HANG_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    proc.stderr.close()
