"""``dba3c bench scale``'s report (``dba3c.benchmarks.scale.report``): the Markdown table,
the command's JSON and log entry, and what the command line says it wrote."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from dba3c.benchmarks.overlap_cost import DEFAULT_SOURCE
from dba3c.benchmarks.record import write_results
from dba3c.benchmarks.scale.grid import Selection
from dba3c.benchmarks.scale.report import scale_command, scale_table
from dba3c.errors import UserError
from tests.support import ROOT


def scale_results() -> dict:
    """The results of a two-point run: W = 16 measured, W = 64 failed."""
    point = {"workers": 16, "ps": 4, "hidden": 128, "replicas": 15, "slow_workers": 1,
             "slow_factor": 2.0, "link_gbit": 10, "time_scale": 10, "step_ms": 20.5,
             "model_step_ms": 18.45, "emulated_model_step_ms": 22.55, "efficiency": 0.65,
             "data_points_per_s": 23414.6, "cpu_busy": 0.4,
             "peak_rss_mb": {"chief": 110.2, "ps": 95.0, "worker": 90.0}}
    failed = {"workers": 64, "ps": 8, "hidden": 128, "replicas": 0, "slow_workers": 0,
              "slow_factor": 2.0, "link_gbit": 100, "time_scale": 50, "error": "rank 3 died"}
    return {"quick": True, "date": "2026-11-23", "machine": "test CPU", "config": "c.yaml",
            "overrides": [], "compute_ms": 12.8, "compute_ms_source": "assumed",
            "time_scale": 10, "links": "emulated links", "host_bytes_per_s": 1.2e9,
            "points": [point, failed], "aggregation": "ps", "collective_algorithm": "recursive"}


def test_table_lists_every_point_with_its_settings():
    r = scale_results()
    point = r["points"][0]
    table = scale_table(r, "dba3c bench scale --quick")
    # a point without its wire dtype (measured before there was a choice) sent float32
    assert ("| 10 | 10 | 16 | 4 | 128 | float32 | 15/16 | 1 x2 | 20.5 | 18.4 (-10%) | "
            "22.6 (+10%) | 0.65 | 23415 | 40% | 110 |") in table
    assert "this host's TCP stack at 1200 MB/s" in table
    assert "| 100 | 50 | 64 | 8 | 128 | float32 | all | none | failed |" in table
    assert "EMULATED: synthetic-compute ranks, T_c = 12.8 ms (assumed); emulated links" in table
    assert "Collectives:" not in table
    collective = scale_table({**r, "aggregation": "collective"}, "dba3c bench scale")
    assert "in the steady window. Collectives: dist.collective_algorithm=recursive." in collective
    overlapped = {**point, "ps": 0, "aggregation": "collective", "overlap": True,
                  "wire_dtype": "bfloat16"}
    assert "| 10 | 10 | 16 | coll. overlapped | 128 | bfloat16 | 15/16 |" in scale_table(
        {**r, "aggregation": "collective", "points": [overlapped]}, "dba3c bench scale")


def test_scale_command_writes_every_point_to_json_and_logs_the_table(tmp_path, monkeypatch):
    from dba3c.benchmarks.scale import cluster as scale
    from dba3c.benchmarks.scale.report import scale_command

    calls: list[tuple[object, ...]] = []  # (what, its arguments...)

    class Cluster:  # records what the bench asks of the emulated cluster
        def __init__(self, nodes, rate):
            calls.append(("start", nodes, rate))
            self.rate = rate

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            calls.append(("stop",))

        def reshape(self, rate):
            calls.append(("reshape", rate))
            self.rate = rate

        def mpiexec_args(self):
            return ["-hosts", "node1"]

        def host_bytes_per_s(self):
            return 1.5e9

    def measured(config, overrides, plans, *, compute_ms, mpiexec_args, host_bytes_per_s,
                 point_timeout, interrupt, done):
        # what a job would return: here a step of T_c + 1 ms per worker; W = 4, P = 1 and
        # W = 16 at 100 Gb/s fail (the job stops there)
        calls.append(("job", len(plans)))
        results = []
        for plan in plans:
            point, time_scale = plan.point, plan.time_scale
            calls.append(("run", point.workers, point.link_gbit, time_scale, mpiexec_args,
                          host_bytes_per_s, point_timeout))
            if (tmp_path / "scale.partial.json").exists():  # the points so far, while it runs
                calls.append(("partial", len(json.loads(
                    (tmp_path / "scale.partial.json").read_text())["points"])))
            if (point.workers, point.ps, point.link_gbit) in ((16, 4, 100), (4, 1, 10)):
                results.append(scale.failed_point(plan, "rank 7 exited 1"))
                done(plan, results[-1])
                return results
            step_ms = compute_ms + point.workers
            results.append({**asdict(point), "time_scale": time_scale, "step_ms": step_ms,
                            "model_step_ms": step_ms, "emulated_model_step_ms": step_ms,
                            "efficiency": compute_ms / step_ms, "data_points_per_s": 1000.0,
                            "cpu_busy": 0.5, "peak_rss_mb": {"chief": 100.0}})
            done(plan, results[-1])
        return results

    monkeypatch.setattr(scale, "run_points", measured)
    monkeypatch.setattr(scale, "EmulatedCluster", Cluster)
    monkeypatch.setattr(scale, "require_emulation", lambda: None)
    table, log = scale_command("configs/breakout.yaml", [], True, None, 10.0,
                               tmp_path / "scale.json", tmp_path / "log")
    results = json.loads((tmp_path / "scale.json").read_text())
    assert [(p["workers"], p["ps"]) for p in results["points"]][:6] == [
        (1, 1), (1, 4), (4, 1), (4, 4), (16, 1), (16, 4)]
    assert results["compute_ms"] == pytest.approx(77 * 2 / 12) and results["time_scale"] == 10
    assert "assumed" in results["compute_ms_source"]
    assert log is not None and log == tmp_path / "log" / f"{results['date']}-bench-scale.md"
    assert log.read_text() == table and table.startswith("# `dba3c bench scale --quick` on ")
    assert "Command: `dba3c bench scale --quick --time-scale 10`" in table
    # W = 16 runs at s = 30: its FC 512 point moves 2.1 budgets of the host at s = 10
    assert table.count("\n| 10 | 30 | 16 | 4 |") == 6  # FC 128, 32, 512, and 3 backup rows
    assert "| 100 | 50 | 16 | 4 | 128 | float32 | all | none | failed |" in table
    assert "| 10 | 10 | 4 | 1 | 128 | float32 | all | none | failed |" in table
    assert results["points"][-1]["error"] == "rank 7 exited 1"
    # one job per link rate and time scale; the first stopped at its third point, the rest
    # relaunched
    assert [c[1] for c in calls if c[0] == "job"] == [4, 1, 7, 2]
    # one cluster of 20 nodes (16 workers + 4 PS), links reshaped per job, stopped at the end
    assert calls[0] == ("start", 20, "1000mbit") and calls[-1] == ("stop",)
    assert [c for c in calls if c[0] == "reshape"] == [("reshape", "333mbit"),
                                                         ("reshape", "2000mbit")]
    assert [c[1] for c in calls if c[0] == "partial"] == list(range(1, 13))
    assert not (tmp_path / "scale.partial.json").exists()
    runs = [c for c in calls if c[0] == "run"]
    assert len(runs) == 13 and all(c[4:] == (["-hosts", "node1"], 1.5e9, 300.0) for c in runs)
    assert results["host_bytes_per_s"] == 1.5e9
    assert [c[3] for c in runs] == [10] * 4 + [30] * 7 + [50] * 2
    assert results["wire_dtype"] == "float32"
    assert {p["wire_dtype"] for p in results["points"]} == {"float32"}

    # --wire-dtype bfloat16: every point's ranks send their gradients in bfloat16, and the
    # table and the command line say so
    table, _ = scale_command("configs/breakout.yaml", [], True, None, 10.0,
                             tmp_path / "bf16.json", None, "collective", Selection((16,)),
                             wire_dtype="bfloat16")
    results = json.loads((tmp_path / "bf16.json").read_text())
    assert results["wire_dtype"] == "bfloat16" and len(results["points"]) == 5
    assert {p["wire_dtype"] for p in results["points"]} == {"bfloat16"}
    assert "Command: `dba3c bench scale --quick --time-scale 10 --aggregation collective " \
           "--workers 16 --wire-dtype bfloat16`" in table
    assert table.count(" | bfloat16 | all | ") == 5
    # the config's dist.wire_dtype is the default; one that --wire-dtype contradicts is refused
    scale_command("configs/breakout.yaml", ["dist.wire_dtype=bfloat16"], True, None, 10.0,
                  tmp_path / "c.json", None, "collective", Selection((16,)))
    results = json.loads((tmp_path / "c.json").read_text())
    assert {p["wire_dtype"] for p in results["points"]} == {"bfloat16"}
    with pytest.raises(UserError, match="^--wire-dtype float32 and dist.wire_dtype=bfloat16 "
                                        "of the config disagree"):
        scale_command("configs/breakout.yaml", ["dist.wire_dtype=bfloat16"], True, None, 10.0,
                      tmp_path / "d.json", None, "collective", wire_dtype="float32")


def test_bench_scale_says_where_it_wrote(tmp_path, monkeypatch, capsys):
    from dba3c.benchmarks.scale import report
    from dba3c.cli import main

    written = []

    def fake_scale_command(config, overrides, quick, compute_ms, time_scale, out_json, log_dir,
                           *rest):
        written.append((out_json, log_dir))
        return "| table |\n", log_dir and log_dir / "entry.md"

    monkeypatch.setattr(report, "scale_command", fake_scale_command)
    log_dir = tmp_path / "log"
    rc = main(["bench", "scale", "--quick", "--out", str(tmp_path / "b" / "x.json"),
               "--log", "--log-dir", str(log_dir)])
    out, err = capsys.readouterr()
    assert rc == 0 and written == [(tmp_path / "b" / "x.json", log_dir)], written
    assert out == "| table |\n"
    assert err == f"bench: results in {tmp_path / 'b' / 'x.json'}; log entry " \
                  f"{log_dir / 'entry.md'}\n", err
    # without --log: the JSON only; by default bench/scale.json
    monkeypatch.chdir(tmp_path)
    rc = main(["bench", "scale", "--quick", "--config", str(ROOT / "configs/breakout.yaml")])
    out, err = capsys.readouterr()
    assert rc == 0 and written[-1] == (Path("bench/scale.json"), None), written
    assert err == "bench: results in bench/scale.json\n", err


def test_bench_log_writes_a_new_entry_each_time_and_never_edits_a_curated_page(
        tmp_path, monkeypatch, capsys):
    # a repository root of its own: dba3c bench scale --log's default directory is docs/log there
    from dba3c.benchmarks.scale import report
    from dba3c.cli import main

    monkeypatch.chdir(tmp_path)
    curated = tmp_path / "docs" / "benchmarks.md"
    curated.parent.mkdir()
    curated.write_bytes(b"# Benchmarks\n\nHand-written figures.\n")
    monkeypatch.setattr(report, "run_scale", lambda *args, **kw: scale_results())
    argv = ["bench", "scale", "--quick", "--config", str(ROOT / "configs/breakout.yaml")]
    pages = []
    for expected in ("2026-11-23-bench-scale.md", "2026-11-23-bench-scale-2.md"):
        assert main([*argv, "--log"]) == 0
        out, err = capsys.readouterr()
        assert err == f"bench: results in bench/scale.json; log entry docs/log/{expected}\n"
        pages.append((tmp_path / "docs" / "log" / expected).read_text())
        assert pages[-1] == out and "| 100 | 50 | 64 | 8 | 128 | float32 | all | none | " \
                                    "failed |" in out
        assert out.startswith("# `dba3c bench scale --quick` on 2026-11-23 (emulated cluster)")
    assert pages[0] == pages[1]
    # without --log: the JSON only
    assert main(argv) == 0
    assert capsys.readouterr().err == "bench: results in bench/scale.json\n"
    # nothing measured here (no bench/overlap_cost.json): the config's cost, and whence
    assert json.loads((tmp_path / "bench" / "scale.json").read_text()) == {
        **scale_results(), "overlap_cost": {"value": 0.14, "source": DEFAULT_SOURCE}}
    assert sorted(p.name for p in (tmp_path / "docs" / "log").iterdir()) == [
        "2026-11-23-bench-scale-2.md", "2026-11-23-bench-scale.md"]
    assert curated.read_bytes() == b"# Benchmarks\n\nHand-written figures.\n"
    assert sorted(p.name for p in (tmp_path / "docs").iterdir()) == ["benchmarks.md", "log"]


def test_bench_scale_charges_the_staging_this_machine_measured(tmp_path, monkeypatch):
    from dba3c.benchmarks.scale import report

    monkeypatch.chdir(tmp_path)
    write_results({"overlap_cost": 0.025, "machine": "Xeon, 2 cores", "date": "2026-11-28",
                   "command": "dba3c bench overlap-cost"}, tmp_path / "bench/overlap_cost.json")
    runs: list = []

    def run_scale(config, overrides, *args, **kw):
        runs.append(overrides)
        return {**scale_results(), "aggregation": "collective"}

    monkeypatch.setattr(report, "run_scale", run_scale)
    table, _ = scale_command(str(ROOT / "configs/breakout.yaml"), ["model.hidden=512"], True,
                             None, 10.0, tmp_path / "s.json", None, "collective")
    assert runs == [["model.hidden=512", "dist.overlap_cost=0.0250"]]
    assert ("Overlapped steps charged staging 0.025 x T_c (measured by dba3c bench "
            "overlap-cost on Xeon, 2 cores, 2026-11-28).") in table
    staging = json.loads((tmp_path / "s.json").read_text())["overlap_cost"]
    assert (staging["machine"], staging["value"]) == ("Xeon, 2 cores", 0.025)
