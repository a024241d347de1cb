"""``dba3c bench real-ranks --namespaces``: real TensorFlow ranks, each on an
emulated node of its own (root and network namespaces, as the tests run) and each bound to
cores of its own, their results written."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.namespaces


def test_each_rank_runs_on_its_own_emulated_node_and_cores(tmp_path):
    out = tmp_path / "real_ranks.json"
    proc = subprocess.run(
        [sys.executable, "-m", "dba3c", "bench", "real-ranks", "--ranks", "2", "--cores", "1",
         "--steps", "10", "--repeats", "1", "--modes", "off", "--namespaces", "1gbit",
         "--work-dir", str(tmp_path / "runs"), "--out", str(out)],
        capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["link"] == "a namespace per rank, 1gbit links"
    (run,) = results["runs"]
    assert run["steps"] == 10 and run["step_s"] > 0
    pattern = re.compile(r"rank (\d) .* on (node\d): 1 of \d+ CPUs bound \((\d)\)")
    placed = sorted(m.groups() for m in map(pattern.search, run["first_lines"]) if m)
    assert placed == [("0", "node1", "0"), ("1", "node2", "1")]
    assert subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                          check=True).stdout.count("dba3c-node") == 0  # stopped after
