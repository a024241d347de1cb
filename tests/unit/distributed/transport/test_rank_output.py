"""A rank's output: each printed line of its stderr written in one piece."""

from __future__ import annotations

import io
from typing import Any, cast

from dba3c.distributed.transport.rank_output import whole_lines


class Writes(io.RawIOBase):
    """A raw stream that records each write it is given."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.writes.append(bytes(b))
        return len(b)


def test_a_ranks_stderr_writes_each_printed_line_in_one_piece():
    raw = Writes()
    # as Python makes a piped stderr (over a raw stream, which typeshed does not model)
    stderr = io.TextIOWrapper(cast(io.BufferedWriter, raw), write_through=True)
    print("error: rank 3 failed", file=stderr)
    assert raw.writes == [b"error: rank 3 failed", b"\n"]  # what mpiexec could interleave
    raw.writes.clear()
    whole_lines(stderr)
    print("error: rank 3 failed", file=stderr)
    print("progress 50%", end="\r", file=stderr)
    assert raw.writes == [b"error: rank 3 failed\n", b"progress 50%\r"]
    whole_lines(object())  # a stream without reconfigure (a test's capture): left alone
