"""The emulated cluster of ``slurm/local-cluster.sh`` seen from Python: start it with N nodes
and a link rate, reshape its links, the mpiexec options that put one rank on each node, and
stop it. Node K is the network namespace ``dba3c-nodeK``; its link is the veth ``d3vK``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Self

from dba3c.errors import UserError

SCRIPT = Path(__file__).resolve().parent.parent / "slurm" / "local-cluster.sh"


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


def cluster(*args: str) -> str:
    """Run ``local-cluster.sh ARGS``; its stdout. RuntimeError with its output if it fails."""
    proc = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=600, check=False)
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

    def __exit__(self, *exc) -> None:
        cluster("stop")

    def reshape(self, rate: str) -> None:
        """Every link (both ways) at ``rate`` from now on."""
        cluster("start", "--nodes", str(self.num_nodes), "--link", rate)
        self.rate = rate

    def mpiexec_args(self) -> list[str]:
        """The hydra options that start rank k on node k+1 (one rank per node)."""
        return shlex.split(cluster("mpiexec-args"))
