"""Bad input: every refusal is one line ``error: ...`` naming the value and what is allowed,
exit code 2, no traceback, and nothing in an existing run directory changes."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from tests.support import dba3c

BAD_YAML = "env:\n  id: breakout\n  num_envs: [1, 2\n"
# a run that trains for a moment, should a refusal it must meet not come
TINY = ["model.kind=a3c_ff", "debug.synthetic_data=true", "train.batch_size=4",
        "train.max_steps=4", "eval.every=0", "run.progress=none"]


def snapshot(directory: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``directory``."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    """A small finished run (a3c_ff on Breakout, synthetic data) with checkpoints."""
    run = tmp_path_factory.mktemp("trained") / "run"
    dba3c("train", "configs/breakout.yaml", f"run.dir={run}", "model.kind=a3c_ff",
          "debug.synthetic_data=true", "train.batch_size=4", "train.max_steps=4",
          "train.max_seconds=0", "run.checkpoint_every=2", "eval.every=0", "run.progress=none")
    return run


CASES = [
    # (arguments, fragment the one-line message must contain, or a tuple of fragments;
    # {bad_yaml}: an existing file, {run}: an existing run directory)
    (["train", "configs/nope.yaml"], "'configs/nope.yaml' not found"),
    (["train", "{bad_yaml}"], "malformed YAML"),
    (["train", "configs"], "is a directory"),
    (["train", "configs/breakout.yaml", "train.lrr=0.1"], "did you mean 'train.lr'"),
    (["train", "configs/breakout.yaml", "trian.lr=0.1"], "did you mean 'train'"),
    (["train", "configs/breakout.yaml", "train.lr=fast"], "train.lr='fast' must be a number"),
    (["train", "configs/breakout.yaml", "train.lr=0"], "train.lr=0 must be a number in (0"),
    (["train", "configs/breakout.yaml", "train.gamma=-0.5"], "train.gamma=-0.5 must be"),
    (["train", "configs/breakout.yaml", "train.gamma=1.5"], "train.gamma=1.5 must be"),
    (["train", "configs/breakout.yaml", "train.batch_size=0"], "train.batch_size=0 must be"),
    (["train", "configs/breakout.yaml", "train.batch_size=2.5"], "must be an integer"),
    (["train", "configs/breakout.yaml", "train.t_max=true"], "must be an integer"),
    (["train", "configs/breakout.yaml", "env.episodic_life=maybe"], "must be true or false"),
    (["train", "configs/breakout.yaml", "env.num_envs=-4"], "env.num_envs=-4 must be"),
    (["train", "configs/breakout.yaml", "env.id=breakot"], "close ROM names: breakout"),
    (["train", "configs/breakout.yaml", "env.id=NoSuchEnv-v9"], "not a known environment"),
    (["train", "configs/breakout.yaml", "model.kind=resnet"], "one of ba3c, a3c_ff, mlp"),
    (["train", "configs/breakout.yaml", "model.obs=hsv"], "one of grayscale, rgb"),
    (["train", "configs/breakout.yaml", "model.kind=mlp"], "needs a vector-observation env"),
    (["train", "configs/cartpole.yaml", "model.kind=ba3c"], "needs an Atari env"),
    (["train", "configs/breakout.yaml", "dist.mode=semi"], "one of sync, async"),
    (["train", "configs/breakout.yaml", "dist.ps=0"], "dist.ps=0 must be"),
    (["train", "configs/breakout.yaml", "adam.beta1=1"], "adam.beta1=1 must be"),
    (["train", "configs/breakout.yaml", "env.batch_size=99"], "must be <= env.num_envs"),
    (["train", "configs/breakout.yaml", "dist.workers=2", "dist.replicas_to_aggregate=3"],
     "dist.replicas_to_aggregate=3 must be <= dist.workers=2"),
    (["train", "configs/breakout.yaml", "train.max_steps=0", "train.max_seconds=0"],
     "would never end"),
    (["train", "configs/breakout.yaml", "run.progress=fancy"], "one of auto, bar, lines, none"),
    (["train", "configs/breakout.yaml", "notakeyvalue"], "must look like section.key=value"),
    (["train", "configs/breakout.yaml", "train.gamma=-1", "train.lr=0"], "train.gamma=-1"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["train"], "the following arguments are required: config"),
    (["train", "configs/breakout.yaml", "--bogus"], "unrecognized arguments: --bogus"),
    (["launch", "configs/breakout.yaml", "--workers", "0"], "--workers 0 must be at least 1"),
    (["launch", "configs/breakout.yaml", "--workers", "two"], "invalid int value: 'two'"),
    (["launch", "configs/breakout.yaml", "--workers", "2",
      "dist.replicas_to_aggregate=3"], "must be <= the number of workers (2)"),
    (["describe", "configs/cartpole.yaml", "--workers", "2", "dist.ps=5000"],
     "dist.ps=5000 must be <= the model's 4675 parameters"),
    # whatever the world size: one process refuses it too (4 actions: 322,437 parameters)
    (["train", "configs/breakout.yaml", "dist.ps=1000000000"],
     "dist.ps=1000000000 must be <= the model's 322437 parameters"),
    (["describe", "configs/cartpole.yaml", "dist.ps=4676"],
     "dist.ps=4676 must be <= the model's 4675 parameters"),
    (["launch", "configs/cartpole.yaml", "--workers", "1", "--ps", "4676"],
     "dist.ps=4676 must be <= the model's 4675 parameters"),
    (["bench", "long", "--run-dir", "{run}"], "exists; a long run needs a fresh directory"),
    (["bench", "long", "--seconds", "0"], "--seconds 0 must be a positive"),
    # every bench its own options, and reached by its own name
    (["bench"], "the following arguments are required: {node,precision,profile,long,scale,"
                "real-ranks,overlap-cost,waiting,stages} (see `dba3c bench --help`)"),
    (["bench", "profile", "--seconds", "60"], "unrecognized arguments: --seconds"),
    (["bench", "real-ranks", "--modes", "on"], "--modes on: a list of off, on, auto that has off"),
    (["bench", "waiting", "--strategies", "poll-fast"],
     "--strategies poll-fast: strategy 'poll-fast': expected poll-<N>us, quick-<N>us or block"),
    (["bench", "stages", "--config", "configs/nope.yaml"], "'configs/nope.yaml' not found"),
    (["plot", "/nonexistent/run", "--out", "/tmp/x"], "/nonexistent/run"),
    (["plot", "docs/figures/study_batch_pong/figure8_predicted_18.csv", "--out", "/tmp/x"],
     "figure8_predicted_18.csv: not a learning curve's table"),
    (["plot", "docs/figures/study_batch_pong/eval_vs_step.csv", "--out", "/tmp/x", "--only",
      "w1-s0,"], "argument --only: 'w1-s0,' has an empty pattern"),
    (["evaluate", "/nonexistent/ckpt"], "not found: expected a checkpoint file or a run dir"),
    (["evaluate", "{bad_yaml}"], "is not a dba3c checkpoint"),
    (["evaluate", "{run}", "--video", "game.avi"], "must end in .mp4 or .gif"),
    (["evaluate", "{run}", "--episodes", "0"], "--episodes 0 must be at least 1"),
    (["evaluate", "{run}", "eval.max_frames=0"], "eval.max_frames=0 must be"),
    (["evaluate", "{run}", "model.hidden=64"], "does not match model.kind=a3c_ff"),
    (["evaluate", "{run}", "--seed", "-5"], "--seed -5 must be in [0, 2147483647]"),
    # where output goes: a file where a directory must be, a directory no one can write in
    (["train", "configs/breakout.yaml", "run.dir={bad_yaml}", *TINY],
     "run.dir={bad_yaml} is a file; it must be a directory"),
    (["train", "configs/breakout.yaml", "run.dir=/sys/dba3c-run", *TINY],
     ("error: run.dir=/sys/dba3c-run", "cannot be written", "this user can write in")),
    (["table", "{run}", "--out", "{bad_yaml}"], "--out {bad_yaml} is a file"),
    (["plot", "{run}", "--out", "{bad_yaml}"], "--out {bad_yaml} is a file"),
    (["plot", "{run}", "--out", "{bad_yaml}.out", "--score", "18", "--node-rate", "{bad_yaml}"],
     "--node-rate: {bad_yaml} is not the results of `dba3c bench node`"),
    (["plot", "{run}", "--out", "{bad_yaml}.out", "--score", "18", "--node-rate", "-3"],
     "--node-rate: '-3' is not above 0"),
    (["sweep", "configs/breakout.yaml", "--grid", "run.seed=0,1", "--dir", "{bad_yaml}",
      *TINY], "--dir {bad_yaml} is a file"),
    (["doctor", "--config", "configs/breakout.yaml", "--json", "{run}/missing/dir/x.json"],
     "--json {run}/missing/dir/x.json: its directory {run}/missing/dir does not exist"),
    # NaN and infinity: refused for every float key, saying what 0 means where it means more
    (["describe", "configs/breakout.yaml", "--workers", "2", "train.max_seconds=.nan"],
     "train.max_seconds=nan must be a finite number >= 0 (0 = no limit)"),
    (["describe", "configs/breakout.yaml", "--workers", "2", "train.max_seconds=.inf"],
     "train.max_seconds=inf must be a finite number >= 0 (0 = no limit)"),
    (["train", "configs/breakout.yaml", "train.lr=.nan"],
     "train.lr=nan must be a finite number in (0, 1]"),
    (["submit", "configs/breakout.yaml", "train.max_seconds=.inf", "--cluster", "local"],
     "train.max_seconds=inf must be a finite number"),
    (["submit", "configs/breakout.yaml", "--time", "abc"],
     "argument --time: invalid int value: 'abc' (see `dba3c submit --help`)"),
    (["sweep", "configs/breakout.yaml", "--grid", "run.seed=0,1", "--grid", "run.seed=2"],
     "--grid run.seed is given twice"),
    (["describe", "configs/breakout.yaml", "env.id=nosuchgamexyz"],
     "is not an ALE ROM (the ROM names: adventure, air_raid, alien,"),
    (["describe", "configs/breakout.yaml", "env.id=ALE/Breakout-v5"],
     "env.id='ALE/Breakout-v5' is a gymnasium Atari id; Atari games are given by their ALE "
     "ROM name: env.id=breakout"),
    (["describe", "configs/breakout.yaml", "train.lrr=0.1"],
     "unknown key 'train.lrr' in the override train.lrr=0.1 (did you mean 'train.lr'?)"),
]


@pytest.mark.parametrize("args,fragment", CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_bad_input_is_one_line_error_exit_2(args, fragment, tmp_path, trained_run):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_YAML)
    run = tmp_path / "existing"
    shutil.copytree(trained_run, run)

    def fill(text: str) -> str:
        return text.replace("{bad_yaml}", str(bad)).replace("{run}", str(run))

    args = [fill(a) for a in args]
    fragments = [fill(f) for f in (fragment if isinstance(fragment, tuple) else (fragment,))]
    before = snapshot(run)
    if args[0] in ("train", "launch") and len(args) > 1 and "--workers" not in args[1:2] \
            and not any(a.startswith("run.dir=") for a in args):
        args.append(f"run.dir={run}")  # point at an existing run: it must stay untouched
    proc = dba3c(*args, check=False, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert all(f in lines[0] for f in fragments), lines[0]
    assert "Traceback" not in proc.stderr
    assert snapshot(run) == before
    assert bad.read_text() == BAD_YAML


@pytest.mark.parametrize("damage", ["truncate", "garbage", "other_model"])
def test_bad_checkpoint_is_refused_and_run_dir_untouched(damage, tmp_path, trained_run):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    overrides = ["model.kind=a3c_ff", "debug.synthetic_data=true", "train.batch_size=4",
                 "train.max_steps=8", "train.max_seconds=0", "eval.every=0"]
    for ckpt in (run / "checkpoints").iterdir():
        if damage == "truncate":
            ckpt.write_bytes(ckpt.read_bytes()[:1000])
        elif damage == "garbage":
            ckpt.write_bytes(b"this is not a checkpoint\n" * 10)
    if damage == "other_model":
        overrides[0] = "model.kind=ba3c"
    before = snapshot(run)
    proc = dba3c("train", "configs/breakout.yaml", f"run.dir={run}", *overrides, check=False)
    error_lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert proc.returncode == 2, proc.stderr
    assert len(error_lines) == 1 and "Traceback" not in proc.stderr
    expected = {"truncate": "corrupt or truncated", "garbage": "not a dba3c checkpoint",
                "other_model": "does not match model.kind=ba3c"}[damage]
    assert expected in error_lines[0]
    assert snapshot(run) == before


def test_corrupt_newest_checkpoint_falls_back_to_the_previous(tmp_path, trained_run):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    newest = sorted((run / "checkpoints").iterdir())[-1]
    newest.write_bytes(newest.read_bytes()[:-10])
    proc = dba3c("train", "configs/breakout.yaml", f"run.dir={run}", "model.kind=a3c_ff",
                 "debug.synthetic_data=true", "train.batch_size=4", "train.max_steps=6",
                 "train.max_seconds=0", "eval.every=0", "run.progress=none")
    assert "corrupt or truncated" in proc.stderr and "older checkpoint" in proc.stderr
    assert "step-0000000006.ckpt" in {p.name for p in (run / "checkpoints").iterdir()}


def test_a_malformed_evaluation_record_is_named_by_file_and_line(tmp_path, trained_run):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    (run / "eval.jsonl").write_text('{"step": 2, "time_s": 1.0, "mean": 3.0}\n'
                                    '{"step": 4, "time_s": 2.0, "mean": "x"}\n')
    before = snapshot(run)
    for command in ("table", "plot"):
        proc = dba3c(command, run, "--out", tmp_path / "out", check=False)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert lines[0] == f'error: {run}/eval.jsonl: line 2 has mean="x", not a number'
    assert snapshot(run) == before and not (tmp_path / "out").exists()


def test_sbatch_refusing_the_job_is_one_line_quoting_sbatch(tmp_path):
    # a site's sbatch refusing the account (srun and sinfo: what chooses the PMI plugin and
    # the CPUs per task asks them)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(
        "#!/bin/sh\necho 'sbatch: error: Batch job submission failed: Invalid account or "
        "account/partition combination specified' >&2\nexit 1\n")
    (bin_dir / "srun").write_text("#!/bin/sh\necho 'srun: MPI types are...'\n"
                                  "echo 'srun: none'\necho 'srun: pmi2'\necho 'srun: pmix_v4'\n")
    (bin_dir / "sinfo").write_text("#!/bin/sh\nexit 1\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    path = f"{bin_dir}:{os.environ['PATH']}"
    for grid in ([], ["--grid", "run.seed=0,1"]):  # one job, and a job array
        proc = dba3c("submit", "configs/cartpole.yaml", "--cluster", "slurm", "--account",
                     "nope", "--folder", tmp_path / "submitit/%j", f"run.dir={tmp_path}/run",
                     *grid, check=False, env={"PATH": path}, timeout=120)
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert errors == ["error: sbatch refused the job: sbatch: error: Batch job submission "
                          "failed: Invalid account or account/partition combination specified "
                          "(check --account, --partition, --qos, --time and --slurm)"]
        assert "sbatch: error" not in proc.stderr.replace(errors[0], "")  # said once
