"""The benchmark harness's records (dba3c.benchmarks.record): the command line, the JSON and
the docs/log entries (the timings themselves are recorded by ``make bench``, never
asserted)."""

from __future__ import annotations

import json
from datetime import date

from dba3c.benchmarks.record import (
    command_line,
    record,
    write_log,
)


def test_command_line_names_the_config_only_when_it_is_not_the_default():
    assert command_line(" node --quick", "configs/breakout.yaml", []) == \
        "dba3c bench node --quick"
    assert command_line(" profile", "configs/pong_small.yaml", ["train.lr=1e-3"]) == \
        "dba3c bench profile --config configs/pong_small.yaml train.lr=1e-3"


def test_a_log_entry_is_never_overwritten(tmp_path):
    log_dir = tmp_path / "docs" / "log"
    assert write_log("# one\n", log_dir, "2026-11-23", "node") == \
        log_dir / "2026-11-23-bench-node.md"
    assert write_log("# two\n", log_dir, "2026-11-23", "node") == \
        log_dir / "2026-11-23-bench-node-2.md"
    (log_dir / "2026-11-23-bench-node-3.md").write_text("# by hand\n")
    assert write_log("# four\n", log_dir, "2026-11-23", "node") == \
        log_dir / "2026-11-23-bench-node-4.md"
    assert write_log("# other\n", log_dir, "2026-11-23", "long").name == \
        "2026-11-23-bench-long.md"
    assert [(p.name, p.read_text()) for p in sorted(log_dir.iterdir())] == [
        ("2026-11-23-bench-long.md", "# other\n"), ("2026-11-23-bench-node-2.md", "# two\n"),
        ("2026-11-23-bench-node-3.md", "# by hand\n"), ("2026-11-23-bench-node-4.md", "# four\n"),
        ("2026-11-23-bench-node.md", "# one\n")]


def test_record_writes_the_json_and_a_log_entry_only_when_asked(tmp_path):
    out_json = tmp_path / "bench" / "results.json"
    assert record({"date": "2026-11-22", "x": 1}, "# page\n", out_json, "node", None) is None
    assert json.loads(out_json.read_text()) == {"date": "2026-11-22", "x": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench"]
    # dated by the results' date; today where they have none (a long run's)
    assert record({"date": "2026-11-22"}, "# page\n", out_json, "node", tmp_path / "log") == \
        tmp_path / "log" / "2026-11-22-bench-node.md"
    assert record({}, "# page\n", out_json, "long", tmp_path / "log") == \
        tmp_path / "log" / f"{date.today().isoformat()}-bench-long.md"
    assert (tmp_path / "log" / "2026-11-22-bench-node.md").read_text() == "# page\n"
