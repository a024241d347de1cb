"""dba3c.training.lock: one run per run directory. A free directory is taken and its holder
recorded; a held one refused naming the holder; a run that is over (its record left behind,
its process gone, its Slurm job ended or requeued) taken over with one line, by one of two
runs that find it over at once. Records are written by hand here, the flock of another run
held through a descriptor of the test's."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys

import pytest

from dba3c.errors import UserError
from dba3c.training.lock import RunLock

HOST = socket.gethostname()


def record(run, host=HOST, pid=None, job=None, started="2026-11-27T10:00:00+00:00") -> dict:
    """Write a holder's record into ``run``'s lock file by hand; return it."""
    holder = {"host": host, "pid": os.getpid() if pid is None else pid, "job": job,
              "started": started}
    run.mkdir(exist_ok=True)
    (run / "run.lock").write_text(json.dumps(holder) + "\n")
    return holder


def hold_flock(run) -> int:
    """Another run's flock on ``run``'s lock file: a descriptor of its own (flock belongs
    to an open file, so this process's RunLock competes with it)."""
    fd = os.open(run / "run.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_free_directory_is_taken_its_holder_recorded_and_let_go(tmp_path):
    run = tmp_path / "run"
    with RunLock(run, "123") as lock:
        held = json.loads((run / "run.lock").read_text())
        assert held["host"] == HOST and held["pid"] == os.getpid() and held["job"] == "123"
        assert held["started"].endswith("+00:00")
        with pytest.raises(BlockingIOError):  # the flock is held
            hold_flock(run)
    assert lock.path == run / "run.lock" and not lock.path.exists()
    assert [p.name for p in run.iterdir()] == []


def test_a_held_directory_is_refused_naming_the_holder_and_left_as_it_was(tmp_path):
    run = tmp_path / "run"
    with RunLock(run, "77"):
        before = {p.name: p.read_bytes() for p in run.iterdir()}
        with pytest.raises(UserError) as refused:
            with RunLock(run, None):
                raise AssertionError("entered a held directory")
        assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    assert str(refused.value).startswith(
        f"{run} is in use by another run: pid {os.getpid()} on host {HOST}, Slurm job 77, "
        f"started ")
    assert str(refused.value).endswith("; wait for it to end or use another run.dir")


def test_a_record_left_behind_is_taken_over_with_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    record(run, host="lost-node", pid=4242, job="9")  # its flock is gone with its process
    with RunLock(run, None):
        assert json.loads((run / "run.lock").read_text())["pid"] == os.getpid()
    assert capsys.readouterr().err == (
        f"taking over {run} from the run of pid 4242 on host lost-node, Slurm job 9, started "
        f"2026-11-27T10:00:00+00:00: it ended without letting go of it\n")


@pytest.mark.parametrize("holder,running,why", [
    ({"pid": "dead"}, None, "pid {pid} is gone"),
    ({"host": "node9", "job": "55"}, False, "Slurm job 55 is no longer running"),
    ({"host": "node9", "job": "8"}, True, "Slurm requeued job 8, which now runs here"),
], ids=["process-gone", "job-ended", "job-requeued"])
def test_a_flock_kept_by_a_run_that_is_over_is_taken_over(tmp_path, capsys, holder,
                                                          running, why):
    """As when a network file system keeps a lost host's lock until its lease ends, or a
    child process inherited it: the lock file is replaced by one the new run holds."""
    run = tmp_path / "run"
    pid = dead_pid() if holder.pop("pid", None) == "dead" else 4242
    old = record(run, pid=pid, **holder)
    stale = hold_flock(run)
    asked = []

    def job_running(job):
        asked.append(job)
        return running

    try:
        with RunLock(run, "8", job_running) as lock:
            assert json.loads(lock.path.read_text())["pid"] == os.getpid()
            assert os.fstat(stale).st_ino != os.stat(lock.path).st_ino  # a new file
            with pytest.raises(BlockingIOError):  # and the new run holds it
                hold_flock(run)
    finally:
        os.close(stale)
    assert asked == (["55"] if running is False else [])  # squeue only for another job
    line = capsys.readouterr().err
    assert line == (f"taking over {run} from the run of pid {pid} on host {old['host']}"
                    f"{', Slurm job ' + old['job'] if old['job'] else ''}, started "
                    f"{old['started']}: {why.format(pid=pid)}\n")
    assert [p.name for p in run.iterdir()] == [".run.lock.takeover"]  # kept, empty


def test_two_runs_taking_over_at_once_do_not_both_take_the_lock(tmp_path, monkeypatch):
    """The second run enters while the first is between finding the lock file still the
    stale one and replacing it: it is refused, and only the first holds the directory."""
    run = tmp_path / "run"
    record(run, pid=dead_pid())
    stale = hold_flock(run)
    real_replace, refused = os.replace, []

    def replace_late(src, dst):
        with pytest.raises(UserError) as second:
            RunLock(run, None).__enter__()
        refused.append(str(second.value))
        real_replace(src, dst)

    monkeypatch.setattr("dba3c.training.lock.os.replace", replace_late)
    try:
        with RunLock(run, None) as first:
            assert json.loads(first.path.read_text())["pid"] == os.getpid()
            assert os.fstat(stale).st_ino != os.stat(first.path).st_ino
    finally:
        os.close(stale)
    assert refused == [f"{run} is being taken over by another run right now; wait for it to "
                       f"end or use another run.dir"]
    assert not (run / "run.lock").exists()


@pytest.mark.parametrize("holder,running,hint", [
    ({}, None, False),  # a live process of this host: this test
    ({"host": "node9", "job": "55"}, True, False),
    ({"host": "node9", "job": "55"}, None, False),  # no Slurm here to ask
    ({"host": "node9"}, None, True),  # another host, no job: nobody can tell
], ids=["live-process", "job-running", "job-unknown", "other-host"])
def test_a_flock_whose_holder_may_be_running_is_refused(tmp_path, holder, running, hint):
    run = tmp_path / "run"
    record(run, **holder)
    stale = hold_flock(run)
    before = (run / "run.lock").read_bytes()
    try:
        with pytest.raises(UserError) as refused:
            with RunLock(run, "8", lambda job: running):
                raise AssertionError("entered a held directory")
    finally:
        os.close(stale)
    assert (run / "run.lock").read_bytes() == before
    message = str(refused.value)
    assert message.startswith(f"{run} is in use by another run: pid ")
    assert message.endswith(f"; if that run is gone (its host lost), delete {run}/run.lock "
                            f"and start again" if hint else "or use another run.dir")


def test_a_run_whose_lock_was_taken_over_leaves_the_new_lock_file_in_place(tmp_path):
    run = tmp_path / "run"
    first = RunLock(run, None).__enter__()
    record(run, pid=dead_pid())  # as if its process had gone and kept the flock
    with RunLock(run, None) as second:
        first.release()
        assert json.loads(second.path.read_text())["pid"] == os.getpid()
    assert not second.path.exists()


def test_a_flock_held_before_the_holder_wrote_its_record_refuses_as_a_starting_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.lock").write_bytes(b"")
    stale = hold_flock(run)
    try:
        with pytest.raises(UserError, match=f"^{run} is in use by a run that is starting"):
            RunLock(run, None).__enter__()
    finally:
        os.close(stale)


def test_a_run_dir_that_is_a_file_or_cannot_be_written_is_refused_naming_it(tmp_path):
    file = tmp_path / "notes.txt"
    file.write_text("keep me")
    with pytest.raises(UserError, match=f"^run.dir={file} is a file; it must be a directory"):
        RunLock(file, None).__enter__()
    with pytest.raises(UserError, match=f"^run.dir={file}/run: {file} is a file"):
        RunLock(file / "run", None).__enter__()
    assert file.read_text() == "keep me"
    # a directory not even root may write in
    with pytest.raises(UserError, match=r"^run.dir=/sys/dba3c-run(: /sys)? cannot be written"):
        RunLock("/sys/dba3c-run", None).__enter__()
