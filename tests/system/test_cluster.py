"""The emulated multi-node cluster (``slurm/local-cluster.sh start --nodes 3``): each node a
network namespace behind a shaped link, with its own slurmd. Real TensorFlow ranks, one per
node, train over TCP through the links (srun, mpiexec inside the allocation, and
``dba3c launch`` with the cluster's mpiexec options), and the bytes counted on every link
agree with the protocol's bytes. Afterwards nothing is left: no namespace, link, bridge,
/etc/netns entry or daemon.

Where namespaces cannot be made (not root, no ``ip netns``) the tests skip with the reason.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from dba3c.benchmarks.emulated import cluster, run_script
from dba3c.launchers.local import find_mpiexec
from tests.support import ROOT, read_jsonl
from tests.support.cluster import running_cluster
from tests.support.mpi import hydra_only
from tests.support.slurm import check_usr2_requeue_resumes_without_gap, sbatch, wait_job

pytestmark = [pytest.mark.slurm, pytest.mark.network, pytest.mark.slow]
NODES = 3

# A TCP segment on a veth link (MTU 1500) carries at most 1448 payload bytes and costs
# 14 (Ethernet) + 20 (IPv4) + 32 (TCP with timestamps) more on the wire.
WIRE_PER_PAYLOAD = (1448 + 14 + 20 + 32) / 1448


@pytest.fixture(scope="module")
def emulated():
    """A running 3-node emulated cluster (10gbit links) for this module; stopped afterwards."""
    with running_cluster("--nodes", str(NODES), "--link", "10gbit"):
        yield


def qdisc_sent(dev: str, netns: str | None = None) -> int:
    """Bytes sent through the root qdisc of ``dev`` (``tc -s qdisc show``)."""
    prefix = ["ip", "netns", "exec", netns] if netns else []
    out = subprocess.run([*prefix, "tc", "-s", "qdisc", "show", "dev", dev],
                         capture_output=True, text=True, check=True).stdout
    sent = re.search(r"Sent (\d+) bytes", out)
    assert sent, out
    return int(sent.group(1))


def link_bytes() -> dict[int, tuple[int, int]]:
    """Node K -> (bytes into it, bytes out of it): the bridge-side veth d3vK shapes what goes
    in, eth0 inside the namespace what comes out."""
    return {k: (qdisc_sent(f"d3v{k}"), qdisc_sent("eth0", f"dba3c-node{k}"))
            for k in range(1, NODES + 1)}


def num_params(overrides: list[str]) -> int:
    """The parameter count the run will have (``dba3c describe``)."""
    out = subprocess.run([sys.executable, "-m", "dba3c", "describe", "configs/cartpole.yaml",
                          *overrides], cwd=ROOT, capture_output=True, text=True, check=True)
    found = re.search(r"^parameters: (\d+)$", out.stdout, re.M)
    assert found, out.stdout
    return int(found.group(1))


def protocol_bytes(n: int, steps: int, grads: dict[int, int]) -> dict[int, tuple[int, int]]:
    """Payload bytes into and out of each node for a run of ``steps`` synchronous steps with
    rank 0 = chief + worker on node 1, rank 1 = the only PS on node 2, rank 2 = a worker on
    node 3, from the message formats in dba3c/distributed/wire.py (float32 buffers with an 8-slot
    header). ``grads[r]``: gradients worker rank r sent (``steps``, or one more when it
    computed one on the final parameters before DONE arrived)."""
    msg = 4 * (8 + n)            # GRAD (worker -> PS), PARAMS (PS -> worker): one shard
    state = 4 * (8 + 3 * n)      # STATE theta, m, v: INIT chief -> PS, final PS -> chief
    psinfo = 6 * 8               # PSINFO PS -> chief, with the first PARAMS and each update
    stats = (14 + 2) * 8         # STATS worker -> chief: 14 report keys, final, rank; a step
    header_only = 4 * 8          # DONE PS -> worker, BYE worker -> PS
    params = (steps + 1) * msg   # PS -> each worker: the start version and every update
    node1_out = state + grads[0] * msg + header_only
    node3_out = grads[2] * msg + header_only + (steps + 1) * stats
    ps_out = 2 * (params + header_only) + (steps + 1) * psinfo + state
    return {1: (params + header_only + (steps + 1) * psinfo + state + (steps + 1) * stats,
                node1_out),
            2: (node1_out + grads[2] * msg + header_only, ps_out),
            3: (params + header_only, node3_out)}


def assert_links_carried_the_protocol(before, after, n: int, steps: int) -> None:
    """Every node's link, both ways, carried the protocol's payload plus TCP/IP headers:
    within 10% of the expected wire bytes, and never less than the payload itself (so the
    data did cross the links, not shared memory)."""
    low = protocol_bytes(n, steps, {0: steps, 2: steps})
    high = protocol_bytes(n, steps, {0: steps + 1, 2: steps + 1})
    for k in range(1, NODES + 1):
        for way, name in enumerate(("into", "out of")):
            got = after[k][way] - before[k][way]
            wire = (low[k][way] * WIRE_PER_PAYLOAD, high[k][way] * WIRE_PER_PAYLOAD)
            assert low[k][way] <= got and 0.9 * wire[0] <= got <= 1.1 * wire[1], (
                f"{got} bytes {name} node{k}; protocol payload {low[k][way]}..{high[k][way]},"
                f" with TCP/IP headers {wire[0]:.0f}..{wire[1]:.0f}")


def test_nodes_are_namespaces_on_a_closed_network_with_slurmds(emulated):
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for k in range(1, NODES + 1):
        assert f"dba3c-node{k}" in names
        routes = subprocess.run(["ip", "netns", "exec", f"dba3c-node{k}", "ip", "-4", "route"],
                                capture_output=True, text=True, check=True).stdout
        assert routes.split() == ["10.77.0.0/24", "dev", "eth0", "proto", "kernel", "scope",
                                  "link", "src", f"10.77.0.{k + 1}"]  # no default route
        # a tuned site's TCP: an idle connection keeps its window (the host keeps its own)
        slow_start = subprocess.run(["ip", "netns", "exec", f"dba3c-node{k}", "sysctl", "-n",
                                     "net.ipv4.tcp_slow_start_after_idle"],
                                    capture_output=True, text=True, check=True).stdout
        assert slow_start.strip() == "0"
    status = cluster("status")
    assert status.count("slurmd running") == NODES and "rate 10Gbit" in status
    out = subprocess.run(["srun", f"-N{NODES}", f"-n{NODES}", "-l", "sh", "-c",
                          "echo $(hostname) $(getent hosts node1 | cut -d' ' -f1) "
                          "$MPIR_CVAR_NOLOCAL $FI_PROVIDER"],
                         cwd="/tmp", capture_output=True, text=True, timeout=120, check=True)
    lines = sorted(out.stdout.split("\n")[:NODES])
    assert lines == [f"{k - 1}: node{k} 10.77.0.2 1 tcp" for k in range(1, NODES + 1)]


def test_a_shaped_link_limits_mpi_over_tcp(emulated):
    """A ping-pong of 4 MB messages through links shaped to 200 Mbit/s (mpiexec with the
    cluster's hydra options, no Slurm) moves at most the link rate, and each link's counter
    saw every byte (the untimed first round trip's too)."""
    hydra_only()
    cluster("start", "--nodes", str(NODES), "--link", "200mbit")
    try:
        before = link_bytes()
        args = shlex.split(cluster("mpiexec-args"))
        proc = subprocess.run([find_mpiexec(), *args, "-n", "2",
                               sys.executable, str(ROOT / "dba3c" / "benchmarks" / "pingpong.py"),
                               str(4 << 20), "5"],
                              capture_output=True, text=True, timeout=120, cwd="/tmp")
        after = link_bytes()
    finally:
        cluster("start", "--nodes", str(NODES), "--link", "10gbit")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["hosts"] == ["node1", "node2"]
    sent = result["bytes_each_way"]
    rate = 2 * sent / result["seconds"]  # payload bytes/s, alternating directions
    link = 200e6 / 8 / WIRE_PER_PAYLOAD  # the most payload a 200 Mbit/s link carries
    assert 0.5 * link < rate <= 1.02 * link, f"{rate / 1e6:.1f} MB/s through 200 Mbit/s links"
    carried = sent + (4 << 20)  # the 5 timed round trips and the untimed first one
    for k in (1, 2):
        for way in (0, 1):
            got = after[k][way] - before[k][way]
            assert carried <= got <= 1.1 * carried * WIRE_PER_PAYLOAD, (k, way, got, carried)
    assert after[3][0] - before[3][0] < 0.01 * sent  # node 3 took no part


@pytest.mark.parametrize("launcher", ["srun", "mpiexec", "dba3c launch"])
def test_training_ranks_on_three_nodes_talk_through_the_links(emulated, tmp_path, launcher):
    """Chief + worker on node1, the PS on node2, a worker on node3 (CartPole, an MLP of
    266,755 parameters, so each gradient and parameter message is about 1 MB)."""
    steps = 30
    run = tmp_path / "run"
    overrides = ["dist.ps=1", "eval.rank=false", "eval.every=0", "model.hidden=512",
                 f"train.max_steps={steps}", "train.max_seconds=0", "run.checkpoint_every=0",
                 "run.log_every=1", "run.progress=none", f"run.dir={run}"]
    n = num_params(overrides)
    before = link_bytes()
    if launcher == "dba3c launch":
        hydra_only()
        env = dict(os.environ, DBA3C_MPIEXEC_ARGS=cluster("mpiexec-args").strip())
        proc = subprocess.run([sys.executable, "-m", "dba3c", "launch", "configs/cartpole.yaml",
                               "--workers", "2", *overrides], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=400)
        assert proc.returncode == 0, proc.stderr[-3000:]
    else:
        job = sbatch(f"-N{NODES}", f"-n{NODES}", "-o", tmp_path / "%j.out",
                     f"--export=ALL,DBA3C_CONFIG=configs/cartpole.yaml,DBA3C_LAUNCHER={launcher}",
                     "slurm/breakout_64.sh", *overrides)
        info = wait_job(job, tmp_path / f"{job}.out", timeout=400)
        log = (tmp_path / f"{job}.out").read_text()
        assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", log[-3000:]
    after = link_bytes()
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == list(range(1, steps + 1))
    assert json.loads((run / "summary.json").read_text())["final_step"] == steps
    assert_links_carried_the_protocol(before, after, n, steps)


def test_usr2_requeue_resumes_across_two_nodes(emulated, tmp_path):
    check_usr2_requeue_resumes_without_gap(tmp_path, "-N2", "-n2")


def test_bad_start_options_fail_with_one_line():
    for args, bad in ((["--nodes", "0"], "'0'"), (["--link", "fast", "--nodes", "2"], "'fast'"),
                      (["--link", "1gbit"], "needs --nodes 2")):
        proc = run_script("start", *args)
        assert proc.returncode == 2 and proc.stdout == "", (args, proc.stderr)
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")
        assert bad in proc.stderr


def test_bad_mpiexec_args_fail_with_one_line(tmp_path):
    env = dict(os.environ, DBA3C_MPIEXEC_ARGS="-hosts 'node1")
    proc = subprocess.run([sys.executable, "-m", "dba3c", "launch", "configs/cartpole.yaml",
                           "--workers", "2", f"run.dir={tmp_path / 'run'}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: DBA3C_MPIEXEC_ARGS=\"-hosts 'node1\" must be shell")
    assert not (tmp_path / "run").exists()


def test_stop_removes_every_namespace_link_bridge_and_daemon(emulated):
    """Run last: stop, also with the leftovers of a crashed run (a namespace, a veth and an
    /etc/netns entry nobody recorded), leaves nothing of the emulated cluster behind."""
    subprocess.run(["ip", "netns", "add", "dba3c-node9"], check=True)
    subprocess.run(["ip", "link", "add", "d3v9", "type", "veth", "peer", "name", "d3v9n"],
                   check=True)
    os.makedirs("/etc/netns/dba3c-node9", exist_ok=True)
    daemons = [line.split("(pid ")[1].rstrip(")") for line in cluster("status").split(
        "\n") if "(pid " in line]
    assert len(daemons) == NODES + 2  # munged, slurmctld, one slurmd per node
    cluster("stop")
    assert "dba3c-node" not in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                              text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    assert not re.search(r"^\d+: (d3v\d+|dba3c-br0)", links, re.M), links
    assert not glob.glob("/etc/netns/dba3c-*")
    assert not [pid for pid in daemons if os.path.exists(f"/proc/{pid}")]
    assert run_script("status").returncode == 3
