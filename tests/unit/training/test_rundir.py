"""dba3c.training.rundir: the run and sweep directories' names, readers (torn lines), atomic
writers and the resume rule (a torn last metrics line does not block it), the config of a
resumed run (what changed, what is refused, the history) and the summary it goes on from, on
hand-made files and configs with expected values written out here."""

from __future__ import annotations

import json
import math
import threading
from datetime import datetime

import pytest
import yaml

from dba3c.config import Config, all_keys
from dba3c.preset import from_dict
from dba3c.training import rundir
from dba3c.training.rundir import (
    DiskFull,
    JsonlWriter,
    RunDir,
    SweepDir,
    read_jsonl,
    truncate_jsonl,
    write_atomic,
)
from tests import support


def test_names_are_the_documented_on_disk_contract(tmp_path):
    run = RunDir(str(tmp_path))
    assert run.config_path == tmp_path / "config.yaml"
    assert run.metrics_path == tmp_path / "metrics.jsonl"
    assert run.evals_path == tmp_path / "eval.jsonl"
    assert run.summary_path == tmp_path / "summary.json"
    assert run.tensorboard_dir == tmp_path / "tb"
    assert run.checkpoints_dir == tmp_path / "checkpoints"
    assert run.sweep_log_path == tmp_path / "sweep.log"
    assert SweepDir(tmp_path).csv_path == tmp_path / "sweep.csv"
    assert SweepDir(tmp_path).submitit_dir == tmp_path / "submitit"
    assert not run.is_run() and not SweepDir(tmp_path).is_sweep()
    assert list(tmp_path.iterdir()) == []  # asking for names creates nothing
    (tmp_path / "metrics.jsonl").write_text("")
    (tmp_path / "sweep.csv").write_text("")
    assert run.is_run() and SweepDir(tmp_path).is_sweep()


# ---- reading JSON lines -------------------------------------------------------------------
def test_read_jsonl_skips_blank_lines_and_a_torn_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    for torn in [b'{"step": 3, "loss/to', b"\0" * 40, b'{"step": 3, "note": "\xc3',
                 b"  ", b""]:
        path.write_bytes(b'{"step": 1}\n\n{"step": 2, "x": null}\r\n' + torn)
        assert read_jsonl(path) == [{"step": 1}, {"step": 2, "x": None}], torn


def test_read_jsonl_keeps_a_whole_last_line_without_newline(tmp_path):
    path = tmp_path / "eval.jsonl"
    path.write_bytes(b'{"step": 1, "mean": 2.5}\n{"step": 2, "mean": 4.0}')
    assert read_jsonl(path) == [{"step": 1, "mean": 2.5}, {"step": 2, "mean": 4.0}]


@pytest.mark.parametrize("bad, message", [
    (b'{"step": 2, "time_s": \n', r"line 3 is not valid JSON"),  # torn, but not last
    (b"[1, 2]\n", r"line 3 is not a JSON object"),
    (b"7", r"line 3 is not a JSON object"),  # parses: not torn
])
def test_read_jsonl_names_file_and_line_of_a_bad_line(tmp_path, bad, message):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1}\n\n' + bad + (b'{"step": 5}\n' if bad.endswith(b"\n") else b""))
    with pytest.raises(ValueError, match=f"^{path}: {message}"):
        read_jsonl(path)


@pytest.mark.parametrize("record, problem", [
    ('{"step": 4, "time_s": 1.0, "mean": "x"}', 'has mean="x", not a number'),
    ('{"step": 4, "time_s": "soon", "mean": 1.0}', 'has time_s="soon", not a number'),
    ('{"step": 4, "mean": 1.0, "max": true}', "has max=true, not a number"),
    ('{"step": 4, "mean": null}', "has mean=null, not a number"),
    ('{"step": 4, "time_s": 1.0}', "has no mean"),
])
def test_an_evaluation_record_without_its_numbers_is_named_by_line(tmp_path, record, problem):
    run = RunDir(tmp_path)
    run.evals_path.write_text('{"step": 2, "time_s": 0.5, "mean": 1.0, "hns": 0.1}\n'
                              + record + "\n")
    with pytest.raises(ValueError) as e:
        run.read_evals()
    assert str(e.value).startswith(f"{run.evals_path}: line 2 {problem}")
    run.evals_path.write_text('{"step": 2, "time_s": 0.5, "mean": 1, "max": 3.5}\n')
    assert run.read_evals() == [{"step": 2, "time_s": 0.5, "mean": 1, "max": 3.5}]


def test_absent_optional_files_read_as_empty(tmp_path):
    run = RunDir(tmp_path / "nothing")
    assert run.read_metrics() == [] and run.read_evals() == []
    assert run.read_summary() == {} and run.read_config() == {}
    assert SweepDir(tmp_path / "nothing").read_rows() == []
    assert run.last_step() == 0


def test_last_step_reads_the_newest_whole_line_from_the_tail(tmp_path):
    run = RunDir(tmp_path)
    lines = [f'{{"step": {s}, "pad": "{"x" * 50}"}}\n' for s in range(1, 101)]
    run.metrics_path.write_text("".join(lines) + '{"step": 101, "lo')
    assert run.last_step() == 100
    # a tail of 100 bytes starts inside line 99: the fragment is skipped, line 100 read
    assert run.last_step(tail_bytes=100) == 100
    run.metrics_path.write_text('{"step": 7}\n{"no_step": 1}\n')
    assert run.last_step() == 7
    run.metrics_path.write_text('{"no_step": 1}\n')
    assert run.last_step() == 0


# ---- the resume rule ----------------------------------------------------------------------
def test_truncate_keeps_lines_up_to_the_step_and_drops_unparseable_ones(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1, "a": 1.5}\n'
                     b'{"step": 2}\n'
                     b'garbage from a crash\n'
                     b'{"note": "no step"}\n'
                     b'{"step": 3}\n'
                     b'{"step": 4}\n'
                     b'\n'
                     b'{"step": 5, "b": "\xc3')
    truncate_jsonl(path, 3)
    assert path.read_bytes() == (b'{"step": 1, "a": 1.5}\n{"step": 2}\n{"note": "no step"}\n'
                                 b'{"step": 3}\n')
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]  # no temporary file
    truncate_jsonl(path, 0)
    assert path.read_bytes() == b'{"note": "no step"}\n'


def test_truncate_logs_applies_to_metrics_and_evals_and_creates_nothing(tmp_path):
    run = RunDir(tmp_path)
    run.metrics_path.write_text("".join(f'{{"step": {s}}}\n' for s in range(1, 9)))
    run.truncate_logs(5)
    assert run.metrics_path.read_text() == "".join(f'{{"step": {s}}}\n' for s in range(1, 6))
    assert not run.evals_path.exists()
    run.evals_path.write_text('{"step": 4, "mean": 1.0}\n{"step": 6, "mean": 2.0}\n')
    run.truncate_logs(5)
    assert run.evals_path.read_text() == '{"step": 4, "mean": 1.0}\n'


# ---- writers ------------------------------------------------------------------------------
def test_jsonl_writer_appends_one_line_per_record_with_null_for_non_finite(tmp_path):
    path = tmp_path / "eval.jsonl"
    path.write_text('{"step": 1}\n')
    writer = JsonlWriter(path)
    writer.write({"step": 2, "mean": math.nan, "max": math.inf, "n": 3})
    assert path.read_text() == '{"step": 1}\n{"step": 2, "mean": null, "max": null, "n": 3}\n'
    writer.write({"step": 3, "s": "a/b"})
    writer.close()
    assert path.read_text().splitlines()[-1] == '{"step": 3, "s": "a/b"}'


def test_summary_round_trip_and_format(tmp_path):
    run = RunDir(tmp_path)
    run.write_summary({"time_to_target_s": None, "final_step": 12, "time_s": math.nan,
                       "stop_reason": "train.max_steps=12 reached"})
    assert run.summary_path.read_text() == (
        '{\n "time_to_target_s": null,\n "final_step": 12,\n "time_s": NaN,\n'
        ' "stop_reason": "train.max_steps=12 reached"\n}')
    assert run.read_summary()["final_step"] == 12
    run.write_summary({"path": tmp_path})  # not JSON-able: written as text
    assert run.read_summary() == {"path": str(tmp_path)}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


@pytest.mark.parametrize("text, message", [("{\"final_step\": ", "cannot be parsed"),
                                           ("[1]", "expected a mapping, found list")])
def test_a_malformed_summary_is_a_value_error_naming_it(tmp_path, text, message):
    run = RunDir(tmp_path)
    run.summary_path.write_text(text)
    with pytest.raises(ValueError, match=f"^{run.summary_path}: {message}"):
        run.read_summary()


def test_create_writes_the_resolved_config(tmp_path):
    cfg = from_dict({"train": {"lr": 3e-4}, "env": {"id": "pong"}})
    run = RunDir(tmp_path / "a" / "b")
    run.create(cfg)
    written = yaml.safe_load(run.config_path.read_text())
    assert written["train"]["lr"] == 3e-4 and written["env"]["id"] == "pong"
    assert written == Config().to_dict() | {"train": written["train"], "env": written["env"]}
    assert run.read_config() == written
    run.config_path.write_text("a: [1\n")
    with pytest.raises(ValueError, match=f"^{run.config_path}: cannot be parsed"):
        run.read_config()
    run.config_path.write_text("- 1\n")
    with pytest.raises(ValueError, match="expected a mapping, found list"):
        run.read_config()


def test_sweep_csv_bytes_and_round_trip(tmp_path):
    sweep = SweepDir(tmp_path)
    rows: list[dict[str, object]] = [
        {"run_dir": "000-dist.ps_1", "dist.ps": "1", "data_points_per_s": 5.5,
         "time_to_target_s": None, "final_eval_mean": 3.0, "status": "ok"},
        {"run_dir": "001-dist.ps_2", "dist.ps": "2", "data_points_per_s": None,
         "time_to_target_s": None, "final_eval_mean": None, "status": "failed (exit 1)"}]
    sweep.write_rows(["dist.ps"], rows)
    assert sweep.csv_path.read_bytes() == (
        b"run_dir,dist.ps,data_points_per_s,time_to_target_s,final_eval_mean,status\r\n"
        b"000-dist.ps_1,1,5.5,,3.0,ok\r\n"
        b"001-dist.ps_2,2,,,,failed (exit 1)\r\n")
    assert sweep.read_rows() == [
        {"run_dir": "000-dist.ps_1", "dist.ps": "1", "data_points_per_s": "5.5",
         "time_to_target_s": "", "final_eval_mean": "3.0", "status": "ok"},
        {"run_dir": "001-dist.ps_2", "dist.ps": "2", "data_points_per_s": "",
         "time_to_target_s": "", "final_eval_mean": "", "status": "failed (exit 1)"}]
    assert [p.name for p in tmp_path.iterdir()] == ["sweep.csv"]  # no temporary file
    sweep.csv_path.write_text("run_dir,x\r\na,1\r\n")
    with pytest.raises(ValueError, match=r"sweep\.csv: missing column\(s\) status"):
        sweep.read_rows()


# ---- atomic writes ------------------------------------------------------------------------
def test_write_atomic_leaves_only_the_target(tmp_path):
    target = tmp_path / "summary.json"
    write_atomic(target, b"first")
    write_atomic(target, b"second")
    assert target.read_bytes() == b"second"
    write_atomic(target, b"sec", memoryview(b"ond"), b"!")  # chunks one after the other
    assert target.read_bytes() == b"second!"
    write_atomic(target, b"second")
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]
    assert target.read_bytes() == b"second"


def test_failed_write_keeps_the_old_file_and_leaves_no_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "step-0000000001.ckpt"
    write_atomic(target, b"old")

    def full_disk(_fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(rundir.os, "fsync", full_disk)
    with pytest.raises(DiskFull) as failed:
        write_atomic(target, b"new")
    assert str(failed.value).startswith(f"cannot write {target}: No space left on device (")
    assert [p.name for p in tmp_path.iterdir()] == [target.name]
    assert target.read_bytes() == b"old"


def test_a_concurrent_reader_never_sees_a_partial_file(tmp_path):
    """One thread rewrites a 2 MiB file with alternating contents while another reads it: every
    read is one whole version."""
    target = tmp_path / "sweep.csv"
    versions = [b"a" * 2 ** 21, b"b" * 2 ** 21]
    write_atomic(target, versions[0])
    done = threading.Event()

    def rewrite():
        for i in range(30):
            write_atomic(target, versions[i % 2])
        done.set()

    writer = threading.Thread(target=rewrite)
    writer.start()
    seen = []
    while not done.is_set():
        data = target.read_bytes()
        seen.append(data in versions)
    writer.join()
    assert seen and all(seen)
    assert [p.name for p in tmp_path.iterdir()] == ["sweep.csv"]


def test_remove_stale_temporaries_only_for_the_given_names(tmp_path):
    for name in (".step-0000000003.ckpt.tmp-123", ".step-0000000004.ckpt.tmp-9",
                 ".summary.json.tmp-123", "step-0000000002.ckpt"):
        (tmp_path / name).write_bytes(b"x")
    rundir.remove_stale_temporaries(tmp_path, "step-*.ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".summary.json.tmp-123",
                                                         "step-0000000002.ckpt"]


# ---- metrics survive a crash that tore their last line ------------------------------------
def test_a_torn_last_metrics_line_does_not_block_a_resume(tmp_path):
    """After a power loss the unsynced tail of metrics.jsonl may be half a line or zeros;
    resuming drops it with the other lines past the checkpoint instead of crashing."""
    path = tmp_path / "metrics.jsonl"
    good = [json.dumps({"step": s, "loss/total": 0.5}) for s in range(1, 6)]
    for tail in ['{"step": 6, "loss/to', "\0" * 40]:
        path.write_text("\n".join(good) + "\n" + tail)
        truncate_jsonl(path, 4)
        assert [m["step"] for m in support.read_jsonl(path)] == [1, 2, 3, 4]


# ---- the config of a resumed run ----------------------------------------------------------
def test_config_changes_lists_every_changed_key_in_schema_order_with_its_kind():
    old = Config().to_dict()
    new = from_dict({"train": {"lr": 5e-4, "max_steps": 8}, "run": {"seed": 3,
                                                                   "progress": "none"}})
    assert rundir.config_changes(old, new.to_dict()) == [
        rundir.ConfigChange("train.lr", 0.001, 0.0005, learning=True),
        rundir.ConfigChange("train.max_steps", 100000, 8, learning=False),
        rundir.ConfigChange("run.seed", 0, 3, learning=True),
        rundir.ConfigChange("run.progress", "auto", "none", learning=False)]
    assert rundir.config_changes(old, Config().to_dict()) == []


def test_train_max_steps_changes_what_a_linear_rate_learns():
    constant = {"train": {"max_steps": 100}}
    linear = {"train": {"max_steps": 100, "lr_schedule": "linear"}}
    longer = from_dict({"train": {"max_steps": 200, "lr_schedule": "linear"}}).to_dict()
    [change] = rundir.config_changes(linear, longer)
    assert change == rundir.ConfigChange("train.max_steps", 100, 200, learning=True)
    # switching the schedule on changes both keys, and both change what it learns
    assert [(c.key, c.learning) for c in rundir.config_changes(constant, longer)] == [
        ("train.lr_schedule", True), ("train.max_steps", True)]


def test_config_changes_reads_an_older_config_yaml_by_the_schema():
    """A key config.yaml lacks (written before it existed) holds its default; a key the
    schema dropped is left out; an integer for a float key is the same number; 0 is not
    false."""
    old = Config().to_dict()
    del old["run"]["allow_changes"], old["synthetic"]
    old["train"]["removed_key"] = 1
    old["eval"]["target_score"] = 300
    assert rundir.config_changes(old, Config().to_dict()) == []
    old["env"]["episodic_life"] = 0
    assert rundir.config_changes(old, Config().to_dict()) == [
        rundir.ConfigChange("env.episodic_life", 0, False, learning=True)]


def test_every_operational_key_is_a_config_key():
    assert rundir.OPERATIONAL_KEYS <= set(all_keys())
    assert {"train.max_seconds", "train.max_steps", "run.log_every", "run.progress",
            "run.checkpoint_every", "eval.every", "run.allow_changes"} <= rundir.OPERATIONAL_KEYS
    assert not {"train.lr", "run.seed", "model.kind", "env.id", "optim.kind",
                "train.batch_size", "dist.workers", "dist.ps"} & rundir.OPERATIONAL_KEYS


def test_resume_refusal_names_each_change_not_allowed_and_the_keys_to_allow():
    lr = rundir.ConfigChange("train.lr", 0.001, 0.0005, learning=True)
    game = rundir.ConfigChange("env.id", "breakout", "pong", learning=True)
    steps = rundir.ConfigChange("train.max_steps", 4, 8, learning=False)
    assert rundir.resume_refusal("R", 4, [steps], allowed=()) is None
    assert rundir.resume_refusal("R", 4, [lr, game, steps], {"train.lr", "env.id"}) is None
    assert rundir.resume_refusal("R", 4, [lr, game, steps], {"train.lr"}) == (
        "R was trained to step 4 with another config; resuming it would change what it "
        "learns: env.id from 'breakout' to 'pong'. Resume with the run's values (its "
        "config.yaml), use a new run.dir, or allow the change with "
        "run.allow_changes=train.lr,env.id (recorded in its config_history.jsonl)")


def test_create_appends_accepted_changes_to_the_history_before_the_config(tmp_path):
    run = RunDir(tmp_path / "run")
    run.create(Config())
    assert not run.config_history_path.exists() and run.read_config_history() == []
    lr = from_dict({"train": {"lr": 5e-4}, "run": {"allow_changes": "train.lr"}})
    changes = rundir.config_changes(run.read_config(), lr.to_dict())
    run.create(lr, 40, changes)
    seed = from_dict({"train": {"lr": 5e-4}, "run": {"seed": 2, "allow_changes": "run.seed"}})
    run.create(seed, 90, rundir.config_changes(run.read_config(), seed.to_dict()))
    lines = run.config_history_path.read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["step"] for r in records] == [40, 90]
    assert all(datetime.fromisoformat(r["time"]).tzinfo is not None for r in records)
    assert records[0]["changes"] == [
        {"key": "train.lr", "old": 0.001, "new": 0.0005, "learning": True},
        {"key": "run.allow_changes", "old": "", "new": "train.lr", "learning": False}]
    assert records[1]["changes"] == [
        {"key": "run.seed", "old": 0, "new": 2, "learning": True},
        {"key": "run.allow_changes", "old": "train.lr", "new": "run.seed", "learning": False}]
    assert yaml.safe_load(run.config_path.read_text())["run"]["seed"] == 2
    assert run.read_config_history() == records


def test_a_resumed_summary_is_summary_json_only_when_it_records_the_resumed_step(tmp_path):
    run = RunDir(tmp_path)
    saved = {"final_step": 4, "last_eval": {"step": 2, "mean": 1.0}}
    assert run.resumed_summary(4, saved) == saved  # no summary.json
    newer = {"final_step": 4, "last_eval": {"step": 4, "mean": 3.0}, "time_s": 9.5}
    run.write_summary(newer)
    assert run.resumed_summary(4, saved) == newer
    # summary.json past the checkpoint (a crash before the next one): its work is redone
    assert run.resumed_summary(2, saved) == saved
    run.summary_path.write_text("{torn")
    assert run.resumed_summary(4, saved) == saved
