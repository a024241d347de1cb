"""One training run per run directory: the lock file ``RUN_DIR/run.lock`` and its format.

The chief takes the lock (:class:`RunLock`) before it reads or writes anything in the run
directory and keeps it for the run's life. Holding it means holding an exclusive ``flock``
on the file (network file systems that offer POSIX locks, NFS and Lustre mounted with
``flock``, share it between hosts); the file records the holder as one JSON object::

    {"host": "node17", "pid": 4242, "job": "123456", "started": "2026-11-27T10:00:00+00:00"}

(``job``: the Slurm job id, null outside Slurm). The holder removes the file when it lets
go, so a record found later was left by a run that ended without letting go.

Whether a new run may take the lock:

- the flock is free: yes. A record left behind (a run killed, its host lost) is taken over
  with one line saying so: the kernel drops the flock of a dead process, and a network file
  system the flock of a lost client once its lease ends.
- the flock is held: the record decides whether its holder's run is over: a process of this
  host that is gone (the flock then belongs to a child that inherited it), a Slurm job that
  no longer runs (``squeue``), or this very job on another host (Slurm requeued it; it runs
  one instance of a job at a time). Until a network file system's lease on a lost host
  ends, that host's flock stays: the new run replaces the lock file by one it holds. Any
  other holder (a live process here, a running job, a host without a job id) is left alone
  and the new run is refused.

Two runs that find the same run over at once must not both replace its lock file: each
replaces it only while holding the flock of a second file, ``RUN_DIR/.run.lock.takeover``
(never removed, so that both always flock the same file), and a run that finds it held is
refused.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from dba3c.errors import UserError
from dba3c.outputs import make_output_dir, refusals
from dba3c.training.rundir import RunDir, disk_space_checked

# squeue's states of a job whose processes may still run (a requeued job is PENDING)
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED",
                            "SIGNALING", "STAGE_OUT", "RESIZING"})
JobRunning = Callable[[str], "bool | None"]


@dataclass(frozen=True)
class Holder:
    """Who holds a run directory: host, process id, Slurm job id (None outside Slurm), and
    when it took the lock (ISO 8601, UTC)."""

    host: str
    pid: int
    job: str | None
    started: str

    @classmethod
    def this_process(cls, job: str | None) -> Holder:
        """This process, taking the lock now."""
        return cls(socket.gethostname(), os.getpid(), job,
                   datetime.now(UTC).isoformat(timespec="seconds"))

    def __str__(self) -> str:
        job = f", Slurm job {self.job}" if self.job else ""
        return f"pid {self.pid} on host {self.host}{job}, started {self.started}"


def encode(holder: Holder) -> bytes:
    """The lock file's content for ``holder``."""
    return json.dumps(asdict(holder)).encode() + b"\n"


def decode(data: bytes) -> Holder | None:
    """The holder a lock file names; None when it names none (empty, or torn by a crash)."""
    try:
        return Holder(**json.loads(data))
    except (ValueError, TypeError):
        return None


def slurm_job_running(job: str) -> bool | None:
    """Whether Slurm still runs job ``job`` (``squeue``); None when it cannot tell (no Slurm
    here, no answer)."""
    try:
        proc = subprocess.run(["squeue", "--noheader", "--states=all", "--jobs", job,
                               "--format=%T"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:  # a job Slurm has forgotten is over
        return False if "Invalid job id" in proc.stderr else None
    return bool(set(proc.stdout.split()) & RUNNING_STATES)


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def run_over(holder: Holder, me: Holder, job_running: JobRunning) -> str | None:
    """Why the run of ``holder``, which still holds the flock, is over (None: it may be
    running, or this host cannot tell)."""
    if holder.host == me.host:
        return None if process_alive(holder.pid) else f"pid {holder.pid} is gone"
    if holder.job is not None and holder.job == me.job:
        return f"Slurm requeued job {holder.job}, which now runs here"
    if holder.job is not None and job_running(holder.job) is False:
        return f"Slurm job {holder.job} is no longer running"
    return None


class RunLock:
    """The lock of one run directory, held from ``with`` to its end (see the module
    docstring). Entering refuses a directory another run holds with a UserError naming the
    holder, and says on stderr when it takes over from a run that is over.

    Args:
      run_dir: the run directory (made if missing; a UserError when it cannot be: a file, a
        directory this user cannot write in). job: this process's Slurm job id.
      job_running: whether a Slurm job runs (:func:`slurm_job_running`; tests pass fakes).
    """

    def __init__(self, run_dir: str | Path, job: str | None,
                 job_running: JobRunning = slurm_job_running):
        self.run_dir = RunDir(run_dir)
        self.path = self.run_dir.lock_path
        self.job, self.job_running = job, job_running
        self._fd: int | None = None

    def __enter__(self) -> RunLock:
        me = Holder.this_process(self.job)
        label = f"run.dir={self.run_dir.path}"
        with disk_space_checked(self.path):
            make_output_dir(self.path.parent, label)
            with refusals(label):
                while self._fd is None:  # again if another run replaced the file meanwhile
                    self._fd = self._take(me)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.release()

    def _take(self, me: Holder) -> int | None:
        """The descriptor of the lock file, flocked, with ``me`` recorded in it; None when
        the file was replaced between opening and locking it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        kept = False
        try:
            locked = self._try_flock(fd)
            holder = decode(_read(fd))
            if locked:
                if not _is_file_at(fd, self.path):
                    return None
                if holder is not None:
                    self._say(holder, "it ended without letting go of it")
                _write(fd, me)
                kept = True
                return fd
            over = None if holder is None else run_over(holder, me, self.job_running)
            if holder is None or over is None:
                raise UserError(self._refusal(holder, me))
            new = self._replace(fd, me)
            if new is not None:
                self._say(holder, over)
            return new
        finally:
            if not kept:
                os.close(fd)

    def _replace(self, stale: int, me: Holder) -> int | None:
        """Put a new lock file, flocked and recording ``me``, in place of the one whose
        flock a run that is over keeps (``stale``), holding the takeover file's flock
        from the check to the replacement; None if another run did it first."""
        guard = os.open(self.run_dir.takeover_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if not self._try_flock(guard):
                raise UserError(f"{self.run_dir.path} is being taken over by another run "
                                f"right now; wait for it to end or use another run.dir")
            return self._replace_guarded(stale, me)
        finally:
            os.close(guard)

    def _replace_guarded(self, stale: int, me: Holder) -> int | None:
        tmp = self.path.with_name(f".{self.path.name}.tmp-{me.pid}")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: nobody else has it
            _write(fd, me)
            if _is_file_at(stale, self.path):
                os.replace(tmp, self.path)
                return fd
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        tmp.unlink()
        return None

    def _try_flock(self, fd: int) -> bool:
        """Take the exclusive flock of ``fd`` if nobody holds it; whether it was taken."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError as e:
            raise UserError(f"cannot lock {self.path}: {e.strerror}: its file system offers "
                            f"no file locks (Lustre: mount it with -o flock; NFS: run its "
                            f"lock service)") from None
        return True

    def _say(self, holder: Holder, why: str) -> None:
        print(f"taking over {self.run_dir.path} from the run of {holder}: {why}",
              file=sys.stderr, flush=True)

    def _refusal(self, holder: Holder | None, me: Holder) -> str:
        if holder is None:
            return (f"{self.run_dir.path} is in use by a run that is starting (its lock "
                    f"{self.path} names no holder yet); wait for it to end or use another "
                    f"run.dir")
        hint = ""
        if holder.host != me.host and holder.job is None:
            hint = (f"; if that run is gone (its host lost), delete {self.path} and start "
                    f"again")
        return (f"{self.run_dir.path} is in use by another run: {holder}; wait for it to "
                f"end or use another run.dir{hint}")

    def release(self) -> None:
        """Let go: remove the lock file (unless another run has replaced it), then the
        flock."""
        if self._fd is None:
            return
        if _is_file_at(self._fd, self.path):
            self.path.unlink()
        os.close(self._fd)
        self._fd = None


def _is_file_at(fd: int, path: Path) -> bool:
    """Whether ``fd`` is the file ``path`` names now (not one removed or replaced since)."""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _read(fd: int) -> bytes:
    return os.pread(fd, 4096, 0)


def _write(fd: int, holder: Holder) -> None:
    data = encode(holder)
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
    os.fsync(fd)
