"""The one-node benchmark's arithmetic and tables (dba3c.benchmarks.node), and ``dba3c bench
node --log``'s entry (the timings themselves are recorded by ``make bench``, never
asserted)."""

from __future__ import annotations

import json

import pytest

from dba3c.benchmarks.node import (
    _dir_bytes,
    bytes_per_step,
    combined_ceiling,
    combined_rate,
    growth_rate,
    long_table,
    markdown_table,
    profile_table,
    read_node_rate,
    sandwiched_overheads,
)
from tests.support import ROOT


def test_combined_rate_adds_the_time_of_both_computations():
    # 100 predictions/s and 50 training samples/s, t_max 5: each data point costs
    # 1.2 / 100 s of prediction (one bootstrap state per 5) + 1 / 50 s of training = 0.032 s
    assert combined_rate(100.0, 50.0, 5) == pytest.approx(1 / 0.032)
    assert combined_rate(1e12, 50.0, 5) == pytest.approx(50.0)


def test_combined_ceiling_shares_the_cores_between_emulation_and_network():
    # emulation alone 6000 data points/s, network alone 3000, on the same 2 cores: a data
    # point costs 2/6000 + 2/3000 = 1/1000 core-seconds, so 2 cores make 2000 per second
    assert combined_ceiling(6000.0, 3000.0) == pytest.approx(2000.0)
    assert combined_ceiling(4000.0, 4000.0) == pytest.approx(2000.0)
    # a free emulator leaves the network's rate
    assert combined_ceiling(1e15, 3000.0) == pytest.approx(3000.0)


def test_bytes_per_step_counts_every_shard_header():
    # 322,695 float32 parameters in 4 shards, each message with an 8-slot float32 header
    assert bytes_per_step(322_695, 4) == {"sent": 4 * (322_695 + 32),
                                          "received": 4 * (322_695 + 32)}
    # dist.wire_dtype=bfloat16: shards of 80,674 x 3 and 80,673 values, two to a float32 slot
    # (the odd one's last slot half empty); the parameters still come back in float32
    assert bytes_per_step(322_695, 4, "bfloat16") == {
        "sent": 4 * (3 * 40_337 + 40_337 + 32), "received": 4 * (322_695 + 32)}


def test_sandwiched_overheads_compare_each_run_with_the_runs_around_it():
    # the machine slows from 100 to 80 data points/s: a fixed 10% overhead stays 10%, where
    # dividing by the first single-process run would report 14% and then 28%
    singles, dists = [100.0, 90.0, 80.0], [0.9 * 95.0, 0.9 * 85.0]
    assert sandwiched_overheads(singles, dists) == pytest.approx([0.10, 0.10])
    assert sandwiched_overheads([100.0, 100.0], [104.0]) == pytest.approx([-0.04])
    with pytest.raises(ValueError, match="cannot surround"):
        sandwiched_overheads([100.0], [90.0])


def _bench_results() -> dict:
    rss = {"peak_rss_mb": {"process": 700.0}}
    return {"quick": True, "date": "2026-11-22", "machine": "test CPU", "config": "c.yaml",
               "cpu_kernels": "TensorFlow oneDNN", "precision": "bfloat16",
               "overrides": [], "parameters": 1000, "flops_per_data_point": 5e8,
               "emulator": {"env_steps_per_s": 9000.0, "frames_per_s": 36000.0},
               "compute": {"predict_states_per_s": 1000.0, "train_samples_per_s": 500.0,
                           "data_points_per_s": 312.5},
               "matmul_flops_per_s": 1.8e11, "single": {"data_points_per_s": 300.0, **rss},
               "combined_ceiling": combined_ceiling(9000.0, 312.5),
               "node_efficiency": 0.96, "node_efficiency_combined": 0.99, "mfu": 0.83,
               "distributed": {"1": {"data_points_per_s": 290.0,
                                     "peak_rss_mb": {"rank0": 700.0, "rank1": 300.0}},
                               "2": {"data_points_per_s": 295.0, **rss}},
               "distributed_overhead": 1 / 30, "bytes_per_step_per_worker": bytes_per_step(
                   1000, 1)}


def test_markdown_table_shows_every_measure():
    text = markdown_table(_bench_results(), "dba3c bench node --quick")
    for fragment in ["9000 env steps/s", "312 data points/s together", "| 0.96 |",
                     "(emulation and network share the cores) | 302 data points/s |",
                     "against the combined ceiling | 0.99 |",
                     "MFU (bfloat16 matmul peak 180 GFLOP/s) | 0.83 |",
                     "(overhead 3%, one pair of runs)",
                     "2 workers + 1 PS, one host | 295", "rank0 700, rank1 300",
                     "sent 4,032", "Machine: test CPU; TensorFlow oneDNN CPU kernels;"]:
        assert fragment in text, fragment


def test_markdown_table_names_the_runs_behind_the_median_overhead():
    results = _bench_results()
    results["overhead_runs"] = {"single": [100.0, 98.0, 96.0, 94.0],
                                "distributed": [97.0, 91.0, 93.0],
                                "overheads": sandwiched_overheads([100.0, 98.0, 96.0, 94.0],
                                                                  [97.0, 91.0, 93.0])}
    results["distributed_overhead"] = 0.02
    text = markdown_table(results, "dba3c bench node")
    assert ("(overhead 2%, median of 3 runs each between two single-process runs: "
            "2%, 6%, 2%)") in text


def test_growth_rate_is_the_least_squares_slope_per_1000_steps():
    # 500 bytes per step exactly, plus a constant: 500,000 bytes per 1000 steps
    assert growth_rate([(1000, 7000), (2000, 507000), (4000, 1507000)]) == pytest.approx(5e5)
    assert growth_rate([(10, 5)]) == 0.0


def test_long_table_reports_growth_per_rank_and_disk_rate():
    result = {"seconds": 1800, "workers": 1, "ps": 1, "warmup_s": 300, "final_step": 22600,
              "peak_rss_mb_after_warmup": {"rank0": 800.0, "rank1": 500.0},
              "peak_rss_mb_final": {"rank0": 880.0, "rank1": 500.0},
              "rss_growth": {"rank0": 0.1, "rank1": 0.0},
              "checkpoint_bytes": 3 * 2**20, "log_bytes_per_1000_steps": 200 * 1024}
    text = long_table(result, "dba3c bench long --seconds 1800")
    for fragment in ["`dba3c bench long --seconds 1800` (1 worker + 1 PS, 22,600 steps in "
                     "1800 s)",
                     "| rank0 | 800 | 880 | +10.0% |", "| rank1 | 500 | 500 | +0.0% |",
                     "checkpoints hold 3.0 MiB", "grows by 200 KiB per 1000 steps"]:
        assert fragment in text, fragment


def test_dir_bytes_splits_checkpoints_from_everything_else(tmp_path):
    run_dir = tmp_path / "checkpoints" / "run"  # a parent named like the folder: not counted
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "tb").mkdir()
    (run_dir / "checkpoints" / "step-0000000001.ckpt").write_bytes(b"c" * 100)
    (run_dir / "checkpoints" / ".step-0000000002.ckpt.tmp-7").write_bytes(b"c" * 30)
    (run_dir / "metrics.jsonl").write_bytes(b"m" * 10)
    (run_dir / "tb" / "events.out").write_bytes(b"t" * 5)
    assert _dir_bytes(run_dir) == {"checkpoints": 130, "logs": 15}


def test_profile_table_lists_each_thread_s_sections():
    result = {"config": "configs/pong_small.yaml", "overrides": [], "date": "2026-11-23",
              "machine": "test CPU", "window_s": 40.0, "warmup_s": 10.0,
              "load_average": (1.5, 2.0, 2.5), "trainer_steps": 2000, "actor_iterations": 8000,
              "data_points_per_s": 1600.0, "states_per_actor_iteration": 8,
              "cores_used": 1.6, "data_points_per_cpu_s": 1000.0,
              "actor": [("predict", 3.25, 0.65), ("unaccounted", 0.1, 0.02)],
              "trainer": [("gradient", 12.5, 0.625)]}
    text = profile_table(result, "dba3c bench profile --config configs/pong_small.yaml")
    for fragment in ["1600 data points/s over 40 s after 10 s of warm-up (1000 per CPU-second; "
                     "the process used 1.60 cores)",
                     "2000 trainer steps, 8000 actor iterations of 8 states",
                     "load average at the end 1.5, 2.0, 2.5",
                     "| actor | predict | 3.250 | 0.650 |", "| actor | unaccounted | 0.100 |",
                     "| trainer | gradient | 12.500 | 0.625 |"]:
        assert fragment in text, fragment


def test_bench_log_writes_a_node_entry_and_never_edits_a_curated_page(tmp_path, monkeypatch,
                                                                      capsys):
    # a repository root of its own: dba3c bench node --log's default directory is docs/log there
    from dba3c.benchmarks import node
    from dba3c.cli import main

    monkeypatch.chdir(tmp_path)
    curated = tmp_path / "docs" / "benchmarks.md"
    curated.parent.mkdir()
    curated.write_bytes(b"# Benchmarks\n\nHand-written figures.\n")
    monkeypatch.setattr(node, "run_bench", lambda config, overrides, quick: _bench_results())
    argv = ["bench", "node", "--quick", "--config", str(ROOT / "configs/breakout.yaml")]
    assert main(argv) == 0  # without --log: the JSON only
    out, err = capsys.readouterr()
    assert err == "bench: results in bench/results.json\n" and "| 0.96 |" in out
    assert json.loads((tmp_path / "bench" / "results.json").read_text()) == _bench_results()
    assert not (tmp_path / "docs" / "log").exists()
    for expected in ("2026-11-22-bench-node.md", "2026-11-22-bench-node-2.md"):
        assert main([*argv, "--log"]) == 0
        out, err = capsys.readouterr()
        assert err == f"bench: results in bench/results.json; log entry docs/log/{expected}\n"
        assert (tmp_path / "docs" / "log" / expected).read_text() == out
        assert out.startswith("# `dba3c bench node --quick` on 2026-11-22\n\nCommand: `dba3c "
                              "bench node --quick --config ")
    assert curated.read_bytes() == b"# Benchmarks\n\nHand-written figures.\n"
    assert main([*argv, "--log-dir", "elsewhere"]) == 2
    assert capsys.readouterr().err == "error: --log-dir is a --log option (give --log)\n"


def test_read_node_rate_takes_the_single_process_rate(tmp_path):
    path = tmp_path / "node.json"
    path.write_text(json.dumps({"single": {"data_points_per_s": 912.5, "steps": 3},
                                "compute": {"data_points_per_s": 2000.0}}))
    assert read_node_rate(path) == 912.5


@pytest.mark.parametrize("content, fragment", [
    (None, "FileNotFoundError"),
    ("{not json", "JSONDecodeError"),
    (json.dumps({"points": []}), "KeyError: 'single'"),
    (json.dumps({"single": {"data_points_per_s": 0}}), "is 0, not a finite rate above 0"),
    ('{"single": {"data_points_per_s": Infinity}}', "is inf, not a finite rate"),
    ('{"single": {"data_points_per_s": NaN}}', "is nan, not a finite rate"),
    (json.dumps({"single": {"data_points_per_s": "fast"}}), "is 'fast', not a finite rate"),
], ids=["missing", "not-json", "scale-results", "zero", "infinity", "nan", "string"])
def test_read_node_rate_names_the_file_that_holds_no_rate(tmp_path, content, fragment):
    path = tmp_path / "node.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=str(path)) as caught:
        read_node_rate(path)
    assert fragment in str(caught.value)
