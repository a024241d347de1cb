"""The peak RSS of a launched process tree (dba3c.launchers.peak_rss.RssSampler) on a real
child process."""

from __future__ import annotations

import subprocess
import sys

from dba3c.launchers.peak_rss import RssSampler


def test_rss_sampler_sees_a_child_allocating_memory():
    child = subprocess.Popen([sys.executable, "-c",
                              "import time; b = bytearray(300 * 2**20); b[::4096] = b'x' * "
                              "len(b[::4096]); time.sleep(2.5)"])
    sampler = RssSampler(child.pid, interval=0.2)
    sampler.start()
    child.wait()
    peak = sampler.stop()
    assert peak["process"] >= 300
