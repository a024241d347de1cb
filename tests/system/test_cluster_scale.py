"""Synthetic-compute runs at scale on the emulated cluster: 18 ranks, one per emulated node
(each behind its own shaped link), run an exact number of steps and leave nothing behind;
a link taken down mid-run ends the job through the stall watchdog, naming the cut-off rank.

Where namespaces cannot be made (not root, no ``ip netns``) the tests skip with the reason.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from dba3c.benchmarks.emulated import EmulatedCluster, emulation_problem
from dba3c.benchmarks.scale.model import WIRE_PER_PAYLOAD, step_bytes
from tests.support import read_jsonl
from tests.support.jobs import SYN, Job, error_lines, wait_for_steps
from tests.support.scale import collective

pytestmark = [pytest.mark.slurm, pytest.mark.network, pytest.mark.slow]
WORKERS, PS = 14, 4  # rank 0 chief + worker, ranks 1-4 PS, ranks 5-17 workers
NODES = WORKERS + PS  # rank r on node r + 1
NUM_PARAMS = 322_695  # the paper network at FC 128
HOST_NEIGH: list[int] = []  # the host's ARP table limits before the module's cluster started


def neigh_thresholds() -> list[int]:
    """The kernel's ARP table limits gc_thresh1, 2 and 3 (one table for all namespaces)."""
    return [int(Path(f"/proc/sys/net/ipv4/neigh/default/gc_thresh{i}").read_text())
            for i in (1, 2, 3)]


@pytest.fixture(scope="module")
def emulated():
    """An 18-node emulated cluster (links 1 Gbit/s) for this module, stopped afterwards."""
    problem = emulation_problem()
    if problem:
        pytest.skip(f"no emulated cluster here: {problem}")
    HOST_NEIGH[:] = neigh_thresholds()
    with EmulatedCluster(NODES, "1000mbit") as cluster:
        yield cluster


@pytest.fixture
def on_the_cluster(emulated, monkeypatch):
    """``dba3c launch`` in this test puts one rank on each emulated node."""
    monkeypatch.setenv("DBA3C_MPIEXEC_ARGS", " ".join(emulated.mpiexec_args()))


def tc_stats(dev: str, netns: str | None = None) -> tuple[int, int]:
    """(bytes sent, bytes still queued) of ``dev``'s root qdisc."""
    prefix = ["ip", "netns", "exec", netns] if netns else []
    out = subprocess.run([*prefix, "tc", "-s", "qdisc", "show", "dev", dev],
                         capture_output=True, text=True, check=True).stdout
    sent = re.search(r"Sent (\d+) bytes", out)
    backlog = re.search(r"backlog (\d+)b", out)
    assert sent and backlog, out
    return int(sent.group(1)), int(backlog.group(1))


def links() -> dict[int, tuple[tuple[int, int], tuple[int, int]]]:
    """Node K -> (into it, out of it), each (bytes sent, bytes queued)."""
    return {k: (tc_stats(f"d3v{k}"), tc_stats("eth0", f"dba3c-node{k}"))
            for k in range(1, NODES + 1)}


def netns_processes() -> list[str]:
    """Command names of the processes in the nodes' namespaces, but their slurmds."""
    pids = [pid for k in range(1, NODES + 1) for pid in subprocess.run(
        ["ip", "netns", "pids", f"dba3c-node{k}"], capture_output=True, text=True,
        check=True).stdout.split()]
    names = []
    for pid in pids:
        try:
            names.append(Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:
            continue  # gone meanwhile
    return [name for name in names if name != "slurmd"]


def test_eighteen_ranks_on_eighteen_nodes_run_exact_steps_and_leave_nothing_in_flight(
        on_the_cluster, tmp_path):
    steps, run = 12, tmp_path / "run"
    before = links()
    with Job("launch", "configs/breakout.yaml", "--workers", WORKERS, "--ps", PS, *SYN,
             "synthetic.compute_ms=50", f"train.max_steps={steps}", "train.max_seconds=0",
             "run.log_every=1", "run.checkpoint_every=0", f"run.dir={run}") as job:
        rc = job.wait(timeout=300)
        assert rc == 0, job.output[-3000:]
        assert not job.survivors(), job.survivors()
    after = links()
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == list(range(1, steps + 1))
    assert json.loads((run / "summary.json").read_text())["final_step"] == steps
    assert all(m["dist/replicas"] == WORKERS for m in read_jsonl(run / "metrics.jsonl"))
    assert netns_processes() == []  # every rank (and hydra proxy) has left its node
    shard = 4 * NUM_PARAMS / PS
    for k in range(1, NODES + 1):
        into, out = (after[k][way][0] - before[k][way][0] for way in (0, 1))
        assert after[k][0][1] == after[k][1][1] == 0, (k, after[k])  # nothing queued
        if k == 1:
            continue  # the chief: its traffic is checked through the others
        # a worker sends a gradient and gets parameters (PS shards) every step; a PS gets a
        # gradient shard from and sends a parameter shard to each of the 14 workers
        expected = steps * (4 * NUM_PARAMS if k > PS + 1 else WORKERS * shard)
        for got in (into, out):
            assert expected <= got <= 1.25 * (expected + 2 * shard) * WIRE_PER_PAYLOAD, (
                k, into, out, expected)


def test_bfloat16_gradients_and_changes_move_the_bytes_the_scale_model_counts(
        on_the_cluster, tmp_path):
    """16 collective ranks on 16 nodes, serial steps: each a reduce-scatter of the gradient
    and an allgather of the parameters' changes, both in bfloat16. The bytes a step adds
    over all links (a run of 4 steps subtracted from one of 14: the start and the end
    cancel) are ``dba3c bench scale``'s model of the point (TCP/IP headers included), half
    of float32's."""
    sent = []
    for steps in (4, 14):
        before = links()
        with Job("launch", "configs/breakout.yaml", "--workers", 16, "--ps", 0, *SYN,
                 "dist.aggregation=collective", "dist.collective_overlap=false",
                 "dist.wire_dtype=bfloat16", "synthetic.compute_ms=50",
                 f"train.max_steps={steps}", "train.max_seconds=0", "run.log_every=1",
                 "run.checkpoint_every=0", f"run.dir={tmp_path / str(steps)}") as job:
            assert job.wait(timeout=300) == 0, job.output[-3000:]
        after = links()
        sent.append(sum(after[k][1][0] - before[k][1][0] for k in after))
    per_step = (sent[1] - sent[0]) / 10
    point = collective(16, wire_dtype="bfloat16")
    assert 0.98 <= per_step / step_bytes(point, NUM_PARAMS) <= 1.05, (per_step, sent)
    float32 = step_bytes(collective(16), NUM_PARAMS)
    assert step_bytes(point, NUM_PARAMS) == pytest.approx(0.5 * float32)


def test_a_link_taken_down_ends_the_job_naming_the_rank_behind_it(on_the_cluster, tmp_path):
    run, timeout, cut = tmp_path / "run", 10, 9  # worker rank 9 lives on node10
    with Job("launch", "configs/breakout.yaml", "--workers", WORKERS, "--ps", PS, *SYN,
             "synthetic.compute_ms=50", "train.max_steps=1000000", "run.log_every=1",
             "run.checkpoint_every=0", f"dist.stall_timeout={timeout}",
             f"run.dir={run}") as job:
        try:
            wait_for_steps(run, job, 3, timeout=240)
            subprocess.run(["ip", "link", "set", f"d3v{cut + 1}", "down"], check=True)
            t0 = time.monotonic()
            rc = job.wait(timeout=timeout + 60)
        finally:
            subprocess.run(["ip", "link", "set", f"d3v{cut + 1}", "up"], check=True)
    assert rc != 0
    errors = error_lines(job.output)
    assert len(errors) == 1, job.output[-3000:]
    assert f"no step for {timeout} s, waiting on ranks [{cut}]" in errors[0], errors
    assert timeout <= job.ended - t0 < timeout + 30, job.ended - t0


def test_host_throughput_is_measured_over_unshaped_links_which_get_their_rate_back(emulated):
    before = tc_stats("d3v2")[0]
    rate = emulated.host_bytes_per_s(num_bytes=1 << 20, reps=20)
    # far above the 1 Gbit/s links (125 MB/s) the cluster runs with, which are back
    assert 2 * 125e6 < rate < 100e9, rate
    assert tc_stats("d3v2")[0] - before >= 20 << 20  # node2 got the pings through its link
    classes = subprocess.run(["tc", "class", "show", "dev", "d3v2"], capture_output=True,
                             text=True, check=True).stdout
    assert "rate 1Gbit" in classes, classes


def test_the_arp_table_has_room_for_every_pair_of_nodes(emulated):
    """Each node may hold every other node in its ARP cache: N x N entries in the one table
    of all namespaces must stay below the limit at which the kernel starts evicting them
    (gc_thresh1; the host's default 128 is below 18 x 18)."""
    limits = neigh_thresholds()
    assert limits[0] >= NODES * NODES, limits
    assert limits[0] <= limits[1] <= limits[2], limits
    assert all(now >= before for now, before in zip(limits, HOST_NEIGH, strict=True))


def test_stopping_the_cluster_leaves_no_namespace_link_or_process(emulated):
    """Run last: the module's cluster stopped by hand (the fixture's stop then finds
    nothing) leaves no namespace, veth, bridge or process of any node, and puts the host's
    ARP table limits back."""
    emulated.__exit__(None, None, None)
    assert "dba3c-node" not in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                              text=True, check=True).stdout
    devices = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                             check=True).stdout
    assert not re.search(r"^\d+: (d3v\d+|dba3c-br0)", devices, re.MULTILINE), devices
    assert neigh_thresholds() == HOST_NEIGH  # the host's own limits are back
