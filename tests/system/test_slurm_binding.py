"""Every rank uses the CPUs Slurm gives it, on a local Slurm that binds tasks as most sites do
(``slurm/local-cluster.sh start --nodes 5 --affinity``: TaskPlugin=task/affinity, each
emulated node declaring the host's real CPU count), whichever path launched it (the sbatch
script, ``dba3c submit``, a point of ``dba3c sweep --launcher slurm``); and srun's PMI plugin
fits the MPI.

The module starts that cluster and stops it afterwards (it differs from the other modules'
clusters, which start their own)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from dba3c.training.rundir import RunDir, SweepDir
from tests.support import ROOT, dba3c, read_jsonl
from tests.support.cluster import running_cluster
from tests.support.mpi import LIBRARY_NAME, SRUN_PLUGIN, mpi_family
from tests.support.slurm import assert_one_rank_per_node, sbatch, wait_job

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

NODE_CPUS = os.cpu_count() or 1
TINY = ["dist.ps=1", "eval.rank=false", "eval.every=0", "debug.synthetic_data=true",
        "model.kind=a3c_ff", "train.batch_size=8", "train.max_steps=5", "run.log_every=1",
        "run.progress=none"]


@pytest.fixture(scope="module")
def binding():
    """A 5-node emulated cluster whose slurmds bind tasks to their CPUs."""
    if NODE_CPUS < 2:
        pytest.skip("binding to a node's CPUs needs a host with 2 or more")
    with running_cluster("--nodes", "5", "--affinity"):
        yield


def run_job(tmp_path, *sbatch_args: str, env: dict[str, str] | None = None) -> str:
    """Run the sbatch script at tiny scale (1 worker on node 1, 1 PS on node 2); its log."""
    run = tmp_path / "run"
    exports = ",".join(["ALL", *(f"{k}={v}" for k, v in (env or {}).items())])
    job = sbatch(f"--export={exports}", *sbatch_args, "-o", tmp_path / "%j.out",
                 "slurm/breakout_64.sh", *TINY, f"run.dir={run}")
    info = wait_job(job, tmp_path / f"{job}.out", timeout=240)
    log = (tmp_path / f"{job}.out").read_text()
    assert info["JobState"] == "COMPLETED", log[-3000:]
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")][-1] == 5
    return log


def bound(log: str) -> dict[int, tuple[int, str]]:
    """rank -> (CPUs bound, host) from the ranks' first lines."""
    return {int(r): (int(n), host) for r, host, n in re.findall(
        r"^rank (\d+) \(\S+\) on (\S+): (\d+) of \d+ CPUs bound", log, re.M)}


def submitit_ranks(folder: Path) -> dict[str, dict[int, tuple[int, str]]]:
    """Slurm job id -> :func:`bound` of its ranks, from the logs submitit keeps of every task
    (``<job>_<task>_log.err``; an array task's job id is ``<job>_<index>``)."""
    jobs: dict[str, dict[int, tuple[int, str]]] = {}
    for log in folder.rglob("*_log.err"):
        job = log.name.rsplit("_", 2)[0]
        jobs.setdefault(job, {}).update(bound(log.read_text()))
    return jobs


def test_ranks_get_every_cpu_of_their_node_even_under_exact(binding, tmp_path):
    # SLURM_EXACT=1 (srun --exact, a default at some sites) would give a step's task one CPU
    log = run_job(tmp_path, "-N2", "-n2", "--exclusive", env={"SLURM_EXACT": "1"})
    assert f"srun --cpus-per-task={NODE_CPUS}" in log
    # the job's own allocation and time limit (#SBATCH --time=02:10:00: the preset's
    # train.max_seconds=7200 and 10 minutes for start-up and the last evaluation) at start
    assert "dba3c: allocation: 2 node(s) x 1 task(s) = 2 tasks" in log
    assert "dba3c: time limit: 130 min -> at most 4.3 node-hours" in log
    ranks = bound(log)
    assert [ranks[r][0] for r in sorted(ranks)] == [NODE_CPUS, NODE_CPUS], log[-3000:]
    assert_one_rank_per_node([ranks[r][1] for r in sorted(ranks)], 2)
    assert "warning:" not in log


def test_a_rank_given_one_cpu_says_so_with_the_fix(binding, tmp_path):
    log = run_job(tmp_path, "-N2", "-n2", env={"DBA3C_CPUS_PER_TASK": "1"})
    assert bound(log)[0][0] == 1
    warning = [line for line in log.splitlines() if line.startswith("warning: rank 0 ")]
    assert len(warning) == 1 and f"--cpus-per-task={NODE_CPUS}" in warning[0], log[-3000:]


def test_a_site_without_exclusive_gives_the_cpus_by_count_and_a_short_limit_is_warned(
        binding, tmp_path):
    # where a site forbids --exclusive, --oversubscribe on the command line cancels the
    # script's #SBATCH --exclusive and --cpus-per-task asks for the node's CPUs; a --time
    # that leaves no room after train.max_seconds (the preset's 7200 s) is warned at start
    log = run_job(tmp_path, "-N2", "-n2", "--oversubscribe", f"--cpus-per-task={NODE_CPUS}",
                  "--time=60")
    assert [cpus for cpus, _ in bound(log).values()] == [NODE_CPUS, NODE_CPUS], log[-3000:]
    warnings = [line for line in log.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and warnings[0].startswith(
        "warning: the job's time limit of 60 min leaves less than 10 min after "
        "train.max_seconds=7200"), log[-3000:]


def test_a_tune_job_on_part_of_a_node_is_refused(binding, tmp_path):
    job = sbatch("--oversubscribe", "--cpus-per-task=1", "-o", tmp_path / "%j.out",
                 "slurm/tune.sh", "--state", tmp_path / "state.json")
    info = wait_job(job, tmp_path / f"{job}.out", timeout=120)
    log = (tmp_path / f"{job}.out").read_text()
    assert info["JobState"] == "FAILED" and info["ExitCode"].startswith("2:"), log[-3000:]
    errors = [line for line in log.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "holds 1 of " in errors[0], log[-3000:]
    assert f"--cpus-per-task={NODE_CPUS}" in errors[0] and "dba3c: tuning" not in log


def test_the_pmi_plugin_is_chosen_for_the_mpi_and_a_wrong_one_stops_before_any_rank(
        binding, tmp_path):
    # pmi2 for MPICH, pmix for Open MPI 5 (a run of these tests in an Open MPI venv)
    plugin, library = SRUN_PLUGIN[mpi_family()], LIBRARY_NAME[mpi_family()]
    log = run_job(tmp_path, "-N2", "-n2")
    assert re.search(rf"srun --mpi={plugin} \(chosen; srun offers [^)]*{plugin}", log), \
        log[-3000:]
    assert f"MPI: {library}" in log
    run = tmp_path / "refused"
    job = sbatch("--export=ALL,DBA3C_SRUN_MPI=pmix_v99", "-N2", "-n2", "-o",
                 tmp_path / "%j.out", "slurm/breakout_64.sh", *TINY, f"run.dir={run}")
    info = wait_job(job, tmp_path / f"{job}.out", timeout=120)
    log = (tmp_path / f"{job}.out").read_text()
    assert info["JobState"] == "FAILED" and info["ExitCode"].startswith("2:"), log[-3000:]
    errors = [line for line in log.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "DBA3C_SRUN_MPI=pmix_v99 is not a plugin" in errors[0]
    assert library in errors[0] and "pmi2" in errors[0]
    assert not run.exists() and "rank 0 (" not in log


def test_a_job_submitted_from_elsewhere_runs_in_its_checkout(binding, tmp_path):
    # sbatch runs a copy of the script; it finds the checkout (and its .venv) from Slurm's
    # record of the submitted path, not from the directory it was submitted in
    import subprocess

    run = tmp_path / "run"
    out = subprocess.run(["sbatch", "--parsable", "-N2", "-n2", "-o", str(tmp_path / "%j.out"),
                          str(ROOT / "slurm" / "breakout_64.sh"), *TINY, f"run.dir={run}"],
                         cwd=tmp_path, capture_output=True, text=True, check=True)
    job = out.stdout.strip().split(";")[0]
    info = wait_job(job, tmp_path / f"{job}.out", timeout=240)
    log = (tmp_path / f"{job}.out").read_text()
    assert info["JobState"] == "COMPLETED", log[-3000:]
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")][-1] == 5


def test_a_node_tuned_by_slurm_tune_feeds_the_cluster_job(binding, tmp_path):
    # slurm/tune.sh on one compute node writes node settings only; breakout_64.sh takes them
    # through DBA3C_OVERRIDES_FILE and keeps its own layout
    import yaml

    node = tmp_path / "node.yaml"
    job = sbatch(f"--export=ALL,DBA3C_CONFIG=configs/cartpole.yaml,DBA3C_TUNE_SECONDS=26,"
                 f"DBA3C_TUNE_OUT={node}", "-o", tmp_path / "%j.out", "slurm/tune.sh",
                 "--trial-seconds", "5", "--state", tmp_path / "state.json")
    info = wait_job(job, tmp_path / f"{job}.out", timeout=240)
    log = (tmp_path / f"{job}.out").read_text()
    assert info["JobState"] == "COMPLETED", log[-3000:]
    tuned = yaml.safe_load(node.read_text())
    assert set(tuned) == {"env", "train"}
    assert set(tuned["env"]) == {"num_envs", "batch_size"}
    log = run_job(tmp_path, "-N2", "-n2", env={"DBA3C_OVERRIDES_FILE": str(node)})
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert config["env"]["num_envs"] == tuned["env"]["num_envs"]
    assert config["train"]["inter_op_threads"] == tuned["train"]["inter_op_threads"]
    assert config["dist"]["ps"] == 1  # the job's layout, not the tuned preset's


def test_a_submit_job_gives_each_rank_a_node_and_all_its_cpus(binding, tmp_path):
    run, folder = tmp_path / "run", tmp_path / "submitit"
    proc = dba3c("submit", "configs/breakout_64.yaml", "--nodes", "2", "--time", "5", "--wait",
                 "--folder", folder / "%j", *TINY, "dist.workers=1", f"run.dir={run}",
                 timeout=300)
    assert f"--cpus-per-task={NODE_CPUS} (the partition's nodes have {NODE_CPUS} CPUs" \
        in proc.stderr
    (ranks,) = submitit_ranks(folder).values()
    hosts = RunDir(run).read_summary()["hosts"]
    assert_one_rank_per_node(hosts, 2)
    assert ranks == {r: (NODE_CPUS, host) for r, host in enumerate(hosts)}


def test_each_sweep_point_spreads_its_ranks_over_nodes_and_is_plotted(binding, tmp_path):
    # dist.workers=2,4 with 1 parameter server and a training chief: points of 3 and 5 ranks,
    # one per node; synthetic compute (the layout is under test, not the learning)
    sweep, out = tmp_path / "sweep", tmp_path / "plots"
    dba3c("sweep", "configs/breakout_64.yaml", "--grid", "dist.workers=2,4", "--launcher",
          "slurm", "--time", "5", "--dir", sweep, "synthetic.enabled=true",
          "synthetic.compute_ms=10", "dist.ps=1", "eval.rank=false", "eval.every=0",
          "train.max_steps=20", "run.log_every=1", "run.progress=none", timeout=400)
    rows = SweepDir(sweep).read_rows()
    assert [(r["dist.workers"], r["status"]) for r in rows] == [("2", "ok"), ("4", "ok")]
    hosts = {r["dist.workers"]: RunDir(sweep / r["run_dir"]).read_summary()["hosts"]
             for r in rows}
    for workers, ranks in (("2", 3), ("4", 5)):
        assert_one_rank_per_node(hosts[workers], ranks)
    # every rank of every point bound to all CPUs of its node, on the node the summary names
    logged = sorted(submitit_ranks(SweepDir(sweep).submitit_dir).values(), key=len)
    assert logged == [{r: (NODE_CPUS, h) for r, h in enumerate(hosts[w])} for w in ("2", "4")]
    dba3c("plot", sweep, "--out", out)
    assert (out / "throughput_vs_workers.png").stat().st_size > 0
