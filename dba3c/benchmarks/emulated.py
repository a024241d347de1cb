"""The emulated cluster of ``slurm/local-cluster.sh`` seen from Python: start it with N nodes
and a link rate, reshape its links, the mpiexec options that put one rank on each node, and
stop it. Node K is the network namespace ``dba3c-nodeK``; its link is the veth ``d3vK``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from statistics import median
from typing import Self

from dba3c.errors import UserError

SCRIPT = Path(__file__).resolve().parents[2] / "slurm" / "local-cluster.sh"
PINGPONG = Path(__file__).resolve().parent / "pingpong.py"
UNSHAPED = "100gbit"  # far above what this host's cores move: such links do not limit


def emulation_problem() -> str | None:
    """Why no emulated cluster can be started here (not root, no ``ip netns``), or None."""
    if os.geteuid() != 0:
        return f"uid {os.geteuid()} is not root (network namespaces need root)"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2) here"
    if subprocess.run(["ip", "netns", "list"], capture_output=True,
                      check=False).returncode != 0:
        return "`ip netns list` fails here (no network namespaces)"
    return None


def require_emulation() -> None:
    """UserError naming why, where no emulated cluster can be started."""
    problem = emulation_problem()
    if problem:
        raise UserError(f"the emulated cluster cannot start here: {problem}")


def link_rate(link_gbit: float, time_scale: float) -> str:
    """The tc rate of a link of ``link_gbit`` Gb/s slowed down ``time_scale`` times, in
    whole Mbit/s (e.g. 10 Gb/s at s = 10: ``1000mbit``)."""
    mbit = round(link_gbit * 1000 / time_scale)
    if mbit < 1:
        raise ValueError(f"{link_gbit:g} Gb/s / {time_scale:g} is below 1 Mbit/s")
    return f"{mbit}mbit"


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``local-cluster.sh ARGS`` (stdout and stderr captured); its result, whatever its
    exit code."""
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=600, check=False)


def cluster(*args: str) -> str:
    """Run ``local-cluster.sh ARGS``; its stdout. RuntimeError with its output if it fails."""
    proc = run_script(*args)
    if proc.returncode != 0:
        raise RuntimeError(f"local-cluster.sh {' '.join(args)} exited {proc.returncode}: "
                           f"{(proc.stdout + proc.stderr)[-2000:]}")
    return proc.stdout


class EmulatedCluster:
    """A context manager: ``num_nodes`` emulated nodes up inside, the cluster stopped on the
    way out (every namespace removed, also after an error)."""

    def __init__(self, num_nodes: int, rate: str):
        self.num_nodes, self.rate = num_nodes, rate

    def __enter__(self) -> Self:
        require_emulation()
        try:
            cluster("start", "--nodes", str(self.num_nodes), "--link", self.rate)
        except BaseException:
            cluster("stop")
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        cluster("stop")

    def reshape(self, rate: str) -> None:
        """Every link (both ways) at ``rate`` from now on."""
        cluster("start", "--nodes", str(self.num_nodes), "--link", rate)
        self.rate = rate

    def host_bytes_per_s(self, num_bytes: int = 4 << 20, reps: int = 20) -> float:
        """Payload bytes per second MPI moves between node1 and node2 when the links do not
        limit (the host's cores do): a ping-pong over links reshaped to ``UNSHAPED``, after
        which the links get their rate back; its median round trip, so that a stray TCP
        retransmission (a 200 ms timeout, seen once in a few runs on a loaded host) in one of
        them does not count."""
        from dba3c.launchers.local import find_mpiexec

        rate = self.rate
        self.reshape(UNSHAPED)
        try:
            proc = subprocess.run([find_mpiexec(), *self.mpiexec_args(), "-n", "2",
                                   sys.executable, str(PINGPONG), str(num_bytes), str(reps)],
                                  capture_output=True, text=True, timeout=300, check=False)
        finally:
            self.reshape(rate)
        if proc.returncode != 0:
            raise RuntimeError(f"ping-pong exited {proc.returncode}: {proc.stderr[-2000:]}")
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        return 2 * num_bytes / median(result["round_trip_seconds"])

    def mpiexec_args(self) -> list[str]:
        """The hydra options that start rank k on node k+1 (one rank per node)."""
        return shlex.split(cluster("mpiexec-args"))
