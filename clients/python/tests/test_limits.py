"""wait_for_path, the one wait for a file a process makes: it returns
when the file is there, and raises, with the process's output, when the
process exits first or when the hang bound passes."""

import subprocess
import sys

import pytest

import limits


def test_returns_once_the_process_makes_the_file(tmp_path):
    path = tmp_path / "ready"
    p = subprocess.Popen([sys.executable, "-c", f"open({str(path)!r}, 'w').close(); import time; time.sleep(30)"],
                         stderr=subprocess.PIPE, text=True)
    try:
        assert limits.wait_for_path(str(path), p, "maker") == str(path)
    finally:
        p.kill()
        p.wait()


def test_raises_with_stderr_when_the_process_exits_first(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit('no file for you')"],
                         stderr=subprocess.PIPE, text=True)
    with pytest.raises(RuntimeError, match="no file for you"):
        limits.wait_for_path(str(tmp_path / "never"), p, "maker")


def test_raises_when_the_bound_passes(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "HANG_S", 0.2)
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], stderr=subprocess.PIPE, text=True)
    try:
        with pytest.raises(TimeoutError, match="made no"):
            limits.wait_for_path(str(tmp_path / "never"), p, "maker", log=lambda: "its log")
    finally:
        p.kill()
        p.wait()
