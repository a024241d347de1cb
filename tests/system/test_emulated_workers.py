"""dist.emulate_workers through the real command line: what it cannot be is refused with one
``error:`` line and exit code 2 before anything runs (the emulation itself, against a real
sync run of 2 workers: tests/unit/distributed/test_single.py)."""

from __future__ import annotations

import pytest

from tests.support import dba3c


@pytest.mark.parametrize(("args", "message"), [
    (["launch", "configs/cartpole.yaml", "--workers", "2", "dist.emulate_workers=2"],
     "error: dist.emulate_workers=2 emulates workers in one process (`dba3c train` alone); a "
     "world of 3 ranks runs real ones: set dist.emulate_workers=0"),
    (["train", "configs/cartpole.yaml", "dist.emulate_workers=-1"],
     "error: dist.emulate_workers=-1 must be a number in [0, inf]"),
    (["train", "configs/cartpole.yaml", "dist.emulate_workers=4", "dist.mode=async"],
     "error: dist.emulate_workers=4 emulates synchronous workers: it needs dist.mode=sync"),
])
def test_what_emulated_workers_cannot_be_is_one_line_exit_2(tmp_path, args, message):
    proc = dba3c(*args, f"run.dir={tmp_path / 'run'}", check=False, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == message
    assert not (tmp_path / "run").exists()
