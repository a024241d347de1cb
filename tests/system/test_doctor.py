"""``dba3c doctor``: alone, under the local mpiexec with 3 ranks, with a rank that never
answers (the job ends non-zero, named, within the timeout), and on the emulated cluster
(``slurm/local-cluster.sh start --nodes 3 --link 1gbit``): the pairs measure the links' rates,
and one node's link shaped down to 100 Mbit/s is named and fails the check; and
``sbatch slurm/doctor.sh`` on it.

Where namespaces cannot be made (not root, no ``ip netns``) the emulated-cluster tests skip
with the reason.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dba3c.benchmarks.emulated import cluster
from dba3c.cpus import cpu_flags, precision_for, read_cpuinfo
from dba3c.launchers.local import find_mpiexec, launch_environment
from tests.support import ROOT
from tests.support.cluster import running_cluster
from tests.support.mpi import LIBRARY_NAME, MPIEXEC_PMI, SRUN_PLUGIN, hydra_only, mpi_family
from tests.support.slurm import assert_one_rank_per_node, sbatch, wait_job

pytestmark = [pytest.mark.slow]
NODES = 3
# A TCP segment on a veth link (MTU 1500) carries at most 1448 payload bytes and costs
# 14 (Ethernet) + 20 (IPv4) + 32 (TCP with timestamps) more on the wire.
WIRE_PER_PAYLOAD = (1448 + 14 + 20 + 32) / 1448
GBIT_PAYLOAD = 1e9 / 8 / WIRE_PER_PAYLOAD     # the most payload bytes/s a link carries
SLOW_NODE = 3


def doctor(*args: str, mpiexec: list[str] | None = None, timeout: float = 240,
           cwd=ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``dba3c doctor ARGS``, alone or after ``mpiexec`` (its options and ``-n``), with
    ``env`` added to the launch environment."""
    command = [sys.executable, "-m", "dba3c", "doctor", *args]
    return subprocess.run([*(mpiexec or []), *command], cwd=cwd,
                          env={**launch_environment(), **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def rank_rows(stdout: str) -> list[list[str]]:
    """The table's rank rows, split on spaces."""
    lines = stdout.split("\n\n")[0].splitlines()
    assert lines[0].startswith("rank  host"), stdout
    return [line.split() for line in lines[1:]]


def test_alone_it_checks_this_process_and_exits_0(tmp_path):
    out = tmp_path / "doctor.json"
    proc = doctor("--json", str(out), f"run.dir={tmp_path / 'runs' / 'x'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = rank_rows(proc.stdout)
    assert len(rows) == 1 and rows[0][0] == "0" and "breakout ok" in proc.stdout
    # no pairs alone: the table, then the launchers a job would use
    table, launchers = proc.stdout.split("\n\n")
    assert launchers.splitlines()[0].startswith(f"mpiexec: {find_mpiexec()} (")
    assert launchers.splitlines()[1].startswith("srun: ")
    assert "doctor: 1 rank" in proc.stderr and "error" not in proc.stderr
    result = json.loads(out.read_text())
    assert result["problem"] is None and result["pairs"] == []
    assert result["rows"][0]["disk_path"] == str(tmp_path) and result["rows"][0]["pmi"] == "none"
    # the library mpi4py loaded: the venv's wheel, named in the table
    mpi_file = Path(result["rows"][0]["mpi_file"])
    assert mpi_file.parent == Path(sys.prefix) / "lib" and mpi_file.name.startswith("libmpi.so")
    assert f"{result['rows'][0]['mpi']} ({mpi_file})" in table
    assert result["rows"][0]["mpi"].startswith(LIBRARY_NAME[mpi_family()])
    assert result["launch"]["mpiexec"] == find_mpiexec()
    # the default model.precision, and whether this CPU has native bfloat16
    native = precision_for("auto", cpu_flags(read_cpuinfo())).native_bfloat16
    assert (result["rows"][0]["precision"], result["rows"][0]["native_bfloat16"]) == (
        "float32", native)


def test_alone_it_reads_dba3c_srun_mpi_as_the_sbatch_scripts_do(tmp_path):
    """A plugin srun lacks is the job's problem before any rank starts (srun_options); the
    doctor says so too, and one srun does offer is named as chosen by the setting."""
    if shutil.which("srun") is None:
        pytest.skip("no srun here")
    bad = doctor(f"run.dir={tmp_path / 'x'}", env={"DBA3C_SRUN_MPI": "pmix_v99"})
    assert bad.returncode == 1, bad.stdout + bad.stderr[-3000:]
    errors = [line for line in bad.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "DBA3C_SRUN_MPI=pmix_v99 is not a plugin of this srun" in \
        errors[0], bad.stderr
    good = doctor(f"run.dir={tmp_path / 'x'}", env={"DBA3C_SRUN_MPI": "pmix"})
    assert good.returncode == 0, good.stdout + good.stderr[-3000:]
    assert "\nsrun: --mpi=pmix (DBA3C_SRUN_MPI; srun offers " in good.stdout


def test_three_ranks_under_mpiexec_report_and_measure_the_pairs(tmp_path):
    out = tmp_path / "doctor.json"
    start = time.monotonic()
    proc = doctor("--json", str(out), mpiexec=[find_mpiexec(), "-n", "3"])
    seconds = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert [row[0] for row in rank_rows(proc.stdout)] == ["0", "1", "2"]
    pairs = proc.stdout.split("\n\n")[1].splitlines()
    assert pairs[0].startswith("pair") and [p.split()[:3] for p in pairs[1:]] == [
        ["0", "<->", "1"], ["0", "<->", "2"]]
    assert proc.stderr.count("doctor: ") == 3, proc.stderr  # one line per phase
    result = json.loads(out.read_text())
    pmi, variable = MPIEXEC_PMI[mpi_family()]  # the PMI this MPI's own mpiexec speaks
    assert all(r["pmi"] == pmi and variable in r["pmi_vars"] for r in result["rows"])
    assert all(r["mpi"].startswith(LIBRARY_NAME[mpi_family()]) for r in result["rows"])
    assert all(p["bytes_per_s"] > 0 and p["latency_s"] > 0 for p in result["pairs"])
    assert seconds < 60, seconds


def test_a_rank_that_never_answers_ends_the_job_named():
    """Rank 2 starts MPI and then sleeps: rank 0 waits --timeout seconds for its report, names
    it and ends the whole job non-zero."""
    mpiexec = find_mpiexec()
    sleeper = [sys.executable, "-c", "from mpi4py import MPI; import time; time.sleep(300)"]
    start = time.monotonic()
    proc = subprocess.run([mpiexec, "-n", "2", sys.executable, "-m", "dba3c", "doctor",
                           "--timeout", "8", ":", "-n", "1", *sleeper], cwd=ROOT,
                          env=launch_environment(), capture_output=True, text=True,
                          timeout=200)
    seconds = time.monotonic() - start
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "error: rank(s) 2 sent no report within 8 s" in proc.stderr, proc.stderr[-3000:]
    assert seconds < 120, seconds


@pytest.fixture(scope="module")
def emulated():
    """A running 3-node emulated cluster (1gbit links) for this module; stopped afterwards."""
    with running_cluster("--nodes", str(NODES), "--link", "1gbit"):
        yield shlex.split(cluster("mpiexec-args"))


def shape_node(k: int, rate: str, burst: int = 16000) -> None:
    """Node ``k``'s link at ``rate`` both ways (the htb class local-cluster.sh made, changed
    on the bridge-side veth and on eth0 inside the node)."""
    for prefix, dev in (([], f"d3v{k}"), (["ip", "netns", "exec", f"dba3c-node{k}"], "eth0")):
        subprocess.run([*prefix, "tc", "class", "change", "dev", dev, "parent", "1:", "classid",
                        "1:1", "htb", "rate", rate, "ceil", rate, "burst", str(burst),
                        "cburst", str(burst), "quantum", "60000"], check=True)


def cluster_doctor(mpiexec_args: list[str], tmp_path) -> tuple[subprocess.CompletedProcess,
                                                                 dict, float]:
    hydra_only()
    out = tmp_path / "doctor.json"
    start = time.monotonic()
    proc = doctor("--json", str(out),
                  mpiexec=[find_mpiexec(), *mpiexec_args, "-n", str(NODES)])
    seconds = time.monotonic() - start
    print(proc.stdout, proc.stderr, sep="\n")
    assert out.exists(), proc.stdout + proc.stderr[-3000:]
    return proc, json.loads(out.read_text()), seconds


def within(value: float, target: float, fraction: float = 0.25) -> bool:
    return abs(value - target) <= fraction * target


@pytest.mark.slurm
@pytest.mark.network
def test_pairs_through_1gbit_links_measure_1gbit(emulated, tmp_path):
    proc, result, seconds = cluster_doctor(emulated, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert [r["host"] for r in result["rows"]] == [f"node{k}" for k in range(1, NODES + 1)]
    rates = [p["bytes_per_s"] for p in result["pairs"]]
    assert len(rates) == NODES - 1
    assert all(within(r, GBIT_PAYLOAD) for r in rates), [f"{r / 1e6:.1f}" for r in rates]
    assert seconds < 60, seconds


@pytest.mark.slurm
@pytest.mark.network
def test_sbatch_doctor_script_runs_every_rank_under_srun(emulated, tmp_path):
    job = sbatch(f"-N{NODES}", f"-n{NODES}", "-o", tmp_path / "%j.out", "slurm/doctor.sh",
                 "--timeout", "30")
    info = wait_job(job, tmp_path / f"{job}.out", timeout=240)
    log = (tmp_path / f"{job}.out").read_text()
    print(log)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", log[-3000:]
    assert "dba3c: doctor, job" in log
    # the table's rows, rank by rank, on distinct nodes (which ones is Slurm's choice)
    found = [re.search(rf"^{k}     (node\d+) ", log, re.M) for k in range(NODES)]
    hosts = [m.group(1) for m in found if m]
    assert_one_rank_per_node(hosts, NODES)
    assert f"srun --mpi={SRUN_PLUGIN[mpi_family()]} [SLURM_MPI_TYPE" in log
    assert "\0" not in log
    assert f"0 <-> 2  {hosts[0]} <-> {hosts[2]}" in log


@pytest.mark.slurm
@pytest.mark.network
def test_one_slow_link_is_measured_and_named(emulated, tmp_path):
    shape_node(SLOW_NODE, "100mbit")
    try:
        proc, result, seconds = cluster_doctor(emulated, tmp_path)
    finally:
        shape_node(SLOW_NODE, "1gbit", burst=125000)
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    fast, slow = result["pairs"]
    assert (fast["b"], slow["b"]) == (1, SLOW_NODE - 1)
    assert within(fast["bytes_per_s"], GBIT_PAYLOAD), fast
    assert within(slow["bytes_per_s"], GBIT_PAYLOAD / 10), slow
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and error[0].startswith(
        f"error: rank 0 <-> rank {SLOW_NODE - 1} (node1 <-> node{SLOW_NODE}) moves "), error
    assert "slowest" in proc.stdout.split("\n\n")[1].splitlines()[-1]  # the last pair
    assert seconds < 60, seconds
