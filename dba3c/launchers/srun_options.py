"""``python -m dba3c.launchers.srun_options``: the ``srun`` options of a job step that fit the
site, printed on stdout for the sbatch scripts (why, on stderr); exit 2 with one ``error:``
line before any rank starts when they cannot.

- ``--mpi=PLUGIN``, the PMI plugin through which srun hands the ranks their world:
  ``DBA3C_SRUN_MPI`` when set, else chosen from what ``srun --mpi=list`` offers and what the
  MPI library mpi4py runs on speaks (:func:`choose_plugin`). MPICH (the PyPI wheel or a
  site's) speaks PMI-2 and, built with it, PMIx; Open MPI 4 and 5 need PMIx; Cray MPICH
  uses ``cray_shasta``; Intel MPI speaks PMI-2.
- ``--cpus-per-task=N``: every CPU the allocation gives a task, the fewest over its nodes
  (:func:`cpus_per_task`; one rank per node: all of its node's); ``DBA3C_CPUS_PER_TASK``
  overrides it. Without it a step under ``--exact`` (or on a shared node) binds each rank to
  one CPU.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping

from dba3c.errors import UserError

# what each MPI library can use, most preferred first (srun's plugin names)
SPOKEN = {"mpich": ("pmi2", "pmix"), "cray-mpich": ("cray_shasta", "pmi2"),
          "openmpi": ("pmix",), "intel": ("pmi2", "pmix"), "unknown": ("pmi2", "pmix")}


def library_first_line(library_version: str) -> str:
    """The first line of ``MPI_Get_library_version``'s text, which names the library and its
    version ("" for no text); the lines after it (release date, configure options) do not."""
    return (library_version.replace("\0", "").strip().splitlines() or [""])[0]


def mpi_family(library_version: str) -> str:
    """Which MPI ``MPI_Get_library_version``'s text names (by its first line: the configure
    line that follows may name compilers): mpich, cray-mpich, openmpi, intel or unknown."""
    text = library_first_line(library_version).lower()
    if "open mpi" in text:
        return "openmpi"
    if "intel" in text:
        return "intel"
    if "cray" in text:
        return "cray-mpich"
    return "mpich" if "mpich" in text else "unknown"


def offered_plugins(srun_list: str) -> tuple[str, ...]:
    """The plugin names in ``srun --mpi=list``'s output (Slurm 22-24 list one per line,
    after a header; versioned PMIx plugins such as ``pmix_v4`` on a line of their own)."""
    names = re.findall(r"^\s*(?:srun: )?\s*([a-z][a-z0-9_]*)\s*$", srun_list, re.M)
    names += re.findall(r"\b(pmix_v\d+)\b", srun_list)
    return tuple(dict.fromkeys(n for n in names if n not in ("srun", "mpi")))


def choose_plugin(family: str, library: str, offered: tuple[str, ...],
                  setting: str | None) -> str:
    """The ``--mpi`` plugin: ``setting`` (``DBA3C_SRUN_MPI``) if srun offers it, else the
    first the library speaks that srun offers (``pmix`` stands for any ``pmix_vN``).
    UserError, one line naming the library, the plugins and the setting, if none fits."""
    where = (f"srun offers {', '.join(offered) or 'no plugin'}; the MPI library is "
             f"{library_first_line(library) or 'an unknown MPI'}")
    if setting:
        if setting not in offered:
            raise UserError(f"DBA3C_SRUN_MPI={setting} is not a plugin of this srun ({where}); "
                            f"set it to one of them")
        return setting
    for plugin in SPOKEN[family]:
        matches = [o for o in offered if o == plugin or o.startswith(plugin + "_v")]
        if matches:
            return matches[0]
    raise UserError(f"no srun PMI plugin fits: {family} needs {' or '.join(SPOKEN[family])}, "
                    f"but {where}; ask the site which one its MPI uses and set DBA3C_SRUN_MPI, "
                    f"or launch with DBA3C_LAUNCHER=mpiexec")


def expand_counts(slurm_list: str) -> list[int]:
    """Slurm's compressed per-node counts, ``12(x3),8`` -> ``[12, 12, 12, 8]``."""
    counts: list[int] = []
    for part in slurm_list.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if match is None:
            raise UserError(f"cannot read the Slurm count list {slurm_list!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def cpus_per_task(job_cpus_per_node: str, tasks_per_node: str) -> int:
    """The CPUs every task of the job can have: the fewest, over the job's nodes, of the
    node's allocated CPUs divided among its tasks (at least 1)."""
    cpus, tasks = expand_counts(job_cpus_per_node), expand_counts(tasks_per_node)
    if len(cpus) != len(tasks):
        raise UserError(f"SLURM_JOB_CPUS_PER_NODE={job_cpus_per_node} and "
                        f"SLURM_TASKS_PER_NODE={tasks_per_node} name different node counts")
    return max(1, min(c // max(1, t) for c, t in zip(cpus, tasks)))


def library_version() -> str:
    """The MPI library mpi4py runs on, asked without starting MPI."""
    import mpi4py

    mpi4py.rc.initialize = False
    from mpi4py import MPI

    return str(MPI.Get_library_version()).replace("\0", "")  # Open MPI's ends in a NUL


def mpi_plugin(environ: Mapping[str, str]) -> tuple[str, str]:
    """(plugin, a line saying why) for this machine's srun and MPI library."""
    library = library_version()
    try:
        srun_list = subprocess.run(["srun", "--mpi=list"], capture_output=True, text=True,
                                   check=False)
    except OSError:
        raise UserError("srun is not on PATH: launch with DBA3C_LAUNCHER=mpiexec, or run "
                        "where Slurm's client commands are") from None
    offered = offered_plugins(srun_list.stdout + srun_list.stderr)
    setting = environ.get("DBA3C_SRUN_MPI") or None
    plugin = choose_plugin(mpi_family(library), library, offered, setting)
    return plugin, (f"srun --mpi={plugin} ({'DBA3C_SRUN_MPI' if setting else 'chosen'}; "
                    f"srun offers {', '.join(offered)}; MPI: {library_first_line(library)})")


def srun_options(environ: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """(options, lines saying why) for a step of the job ``environ`` describes."""
    plugin, because = mpi_plugin(environ)
    why = [f"dba3c: {because}"]
    override = environ.get("DBA3C_CPUS_PER_TASK")
    if override:
        if not override.isdigit() or int(override) < 1:
            raise UserError(f"DBA3C_CPUS_PER_TASK={override} must be a positive whole number")
        cpus = int(override)
        why.append(f"dba3c: srun --cpus-per-task={cpus} (DBA3C_CPUS_PER_TASK)")
    else:
        cpus = cpus_per_task(environ.get("SLURM_JOB_CPUS_PER_NODE", "1"),
                             environ.get("SLURM_TASKS_PER_NODE", "1"))
        why.append(f"dba3c: srun --cpus-per-task={cpus} (the allocation's CPUs per task: "
                   f"SLURM_JOB_CPUS_PER_NODE={environ.get('SLURM_JOB_CPUS_PER_NODE', '?')}, "
                   f"SLURM_TASKS_PER_NODE={environ.get('SLURM_TASKS_PER_NODE', '?')})")
    return [f"--mpi={plugin}", f"--cpus-per-task={cpus}"], why


def main() -> int:
    """Print the options (stdout) and why (stderr)."""
    try:
        options, why = srun_options(os.environ)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(why), file=sys.stderr)
    print(" ".join(options))
    return 0


if __name__ == "__main__":
    sys.exit(main())
