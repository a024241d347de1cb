"""Where commands write (dba3c.outputs): a file where a directory must be, a missing
directory for a file, a directory no one may write in: one UserError naming it, nothing
made."""

from __future__ import annotations

import errno
import shutil
import subprocess

import pytest

from dba3c.errors import UserError
from dba3c.outputs import check_output_dir, check_output_file, make_output_dir, refusals


def test_a_directory_is_made_with_its_parents_and_an_existing_one_taken(tmp_path):
    assert make_output_dir(tmp_path / "a" / "b", "--out x") == tmp_path / "a" / "b"
    assert (tmp_path / "a" / "b").is_dir()
    make_output_dir(tmp_path / "a", "--out x")  # exists: fine
    check_output_dir(tmp_path / "new" / "deeper", "--out y")
    assert not (tmp_path / "new").exists()  # the check makes nothing


def test_a_file_where_a_directory_must_be_is_refused_naming_it(tmp_path):
    file = tmp_path / "notes.txt"
    file.write_text("keep me")
    with pytest.raises(UserError, match=r"^run.dir=x is a file; it must be a directory"):
        make_output_dir(file, "run.dir=x")
    with pytest.raises(UserError, match=rf"^--out y: {file} is a file, not a directory$"):
        check_output_dir(file / "sub", "--out y")
    assert file.read_text() == "keep me"


def test_a_file_needs_an_existing_directory_and_must_not_be_one(tmp_path):
    check_output_file(tmp_path / "x.json", "--json x.json")
    with pytest.raises(UserError, match=rf"its directory {tmp_path}/missing/dir does not exist"):
        check_output_file(tmp_path / "missing" / "dir" / "x.json", "--json m")
    with pytest.raises(UserError, match=r"^--json d is a directory; it must name a file$"):
        check_output_file(tmp_path, "--json d")
    assert list(tmp_path.iterdir()) == []


def test_what_the_file_system_refuses_is_a_user_error_and_a_full_disk_is_not():
    with pytest.raises(UserError, match=r"^run.dir=/sys/dba3c-x(: /sys)? cannot be written: "
                                        r".*; give a directory this user can write in$"):
        make_output_dir("/sys/dba3c-x", "run.dir=/sys/dba3c-x")  # root cannot write there
    with pytest.raises(OSError) as e, refusals("--out z"):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert not isinstance(e.value, UserError) and e.value.errno == errno.ENOSPC


def test_an_immutable_directory_is_refused_even_for_root(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    if shutil.which("chattr") is None or subprocess.run(
            ["chattr", "+i", str(locked)], capture_output=True).returncode != 0:
        pytest.skip("no chattr +i here (a file system without the flag, or not root)")
    try:
        with pytest.raises(UserError, match=rf"^run.dir={locked}/run: {locked} cannot be "
                                            r"written: not writable by this user"):
            make_output_dir(locked / "run", f"run.dir={locked}/run")
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)
    assert list(locked.iterdir()) == []
