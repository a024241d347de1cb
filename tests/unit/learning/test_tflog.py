"""TensorFlow's start-up noise (dba3c.learning.tflog): log lines below the level are
recognised and dropped, the rest kept in order."""

from __future__ import annotations

import os
import sys

import pytest

from dba3c.learning.tflog import filtered_stderr, is_below_level, quiet_import

ONEDNN = ("I0000 00:00:1795450614.750164    7826 port.cc:153] oneDNN custom operations are "
          "on. You may see slightly different numerical results")
PREAMBLE = ("WARNING: All log messages before absl::InitializeLog() is called are written to "
            "STDERR")


@pytest.mark.parametrize("line,level,hidden", [
    (ONEDNN, 0, False), (ONEDNN, 1, True), (ONEDNN, 2, True),
    (PREAMBLE, 0, False), (PREAMBLE, 1, True),
    ("W0000 00:00:1795450614.750164    7826 foo.cc:12] a warning", 1, False),
    ("W0000 00:00:1795450614.750164    7826 foo.cc:12] a warning", 2, True),
    ("E0000 00:00:1795450614.750164    7826 foo.cc:12] an error", 2, False),
    ("E0000 00:00:1795450614.750164    7826 foo.cc:12] an error", 3, True),
    ("Traceback (most recent call last):", 3, False),
    ("I think this is not a log line", 3, False),
])
def test_log_lines_below_the_level_are_recognised(line, level, hidden):
    assert is_below_level(line, level) == hidden


def test_quiet_import_drops_only_noise_and_keeps_the_rest_in_order(tmp_path, monkeypatch,
                                                                   capfd):
    module = "fake_noisy_library"
    (tmp_path / f"{module}.py").write_text(
        "import os\n"
        f"os.write(2, b'{PREAMBLE}\\n{ONEDNN}\\nkept 1\\n')\n"
        "os.write(2, b'E0000 00:00:1.5    7 x.cc:1] kept 2\\n')\n"
        "VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    quiet_import(module, 2)
    quiet_import(module, 2)  # e.g. cli.main called twice in one process: one filter
    assert sum(type(f).__name__ == "_QuietFinder" for f in sys.meta_path) == 1
    try:
        imported = __import__(module)
    finally:
        sys.modules.pop(module, None)
    assert imported.VALUE == 42
    assert capfd.readouterr().err == "kept 1\nE0000 00:00:1.5    7 x.cc:1] kept 2\n"
    assert not any(type(f).__name__ == "_QuietFinder" for f in sys.meta_path)  # used once


def test_filtered_stderr_passes_everything_at_level_0(capfd):
    with filtered_stderr(0):
        os.write(2, (PREAMBLE + "\n").encode())
    assert capfd.readouterr().err == PREAMBLE + "\n"
