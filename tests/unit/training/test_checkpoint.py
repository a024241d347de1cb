"""Checkpoint files (dba3c.training.checkpoint): bit-exact round trip, checksums, fallback to
an older checkpoint, pruning, refusal of pickled content, saving from shards."""

from __future__ import annotations

import hashlib
import io
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from dba3c.errors import UserError
from dba3c.training import checkpoint
from dba3c.training.checkpoint import MAGIC, Checkpoint


def make_ckpt(step: int, n: int = 37, seed: int = 0) -> Checkpoint:
    """A checkpoint with awkward float32 values (signed zeros, denormals, extremes, NaN) and
    a nested, non-ASCII meta."""
    rng = np.random.default_rng([seed, step])
    theta = rng.normal(size=n).astype(np.float32)
    theta[:6] = np.array([-0.0, 1e-45, np.finfo(np.float32).max, -np.inf, np.nan,
                          1.0 + 2.0 ** -23], np.float32)
    m = rng.normal(scale=1e-3, size=n).astype(np.float32)
    v = (rng.random(n) * 1e-6).astype(np.float32)
    meta = {"config": {"train": {"lr": 1e-3, "max_steps": 10 ** 6}}, "seed": seed,
            "time_s": 1234.5678, "note": "pong \u2013 \u00e9t\u00e9", "list": [1, None, True]}
    return Checkpoint(step, theta, m, v, 2 ** 40 + step, meta)


def bits(a: np.ndarray) -> np.ndarray:
    """The raw float32 bit patterns (so NaN and -0.0 compare exactly)."""
    assert a.dtype == np.float32
    return a.view(np.uint32)


def assert_same(got: Checkpoint, want: Checkpoint) -> None:
    """Every field of two checkpoints is identical, arrays bit for bit."""
    assert got.step == want.step and got.adam_count == want.adam_count
    for name in ("theta", "adam_m", "adam_v"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.shape == b.shape
        np.testing.assert_array_equal(bits(a), bits(b))
    assert got.meta == want.meta


def latest(directory: Path) -> Checkpoint:
    """checkpoint.load_latest of a directory that must hold a valid checkpoint."""
    ckpt = checkpoint.load_latest(directory)
    assert ckpt is not None
    return ckpt


def craft(payload: bytes) -> bytes:
    """A file with the right magic and a correct checksum around an arbitrary payload."""
    return MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def npz(**arrays) -> bytes:
    """An uncompressed .npz holding ``arrays`` (object arrays are pickled by numpy)."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def test_round_trip_is_bit_exact(tmp_path):
    want = make_ckpt(1234567)
    path = checkpoint.save(tmp_path, want, keep=3)
    assert path == tmp_path / "step-0001234567.ckpt"
    got = checkpoint.load(path)
    assert_same(got, want)
    assert got.theta.dtype == got.adam_m.dtype == got.adam_v.dtype == np.float32
    assert_same(latest(tmp_path), want)
    assert_same(checkpoint.load_path(str(tmp_path)), want)
    # the file is exactly the documented format: magic, sha256 hex of the payload, payload
    data = path.read_bytes()
    head = len(MAGIC)
    assert data[:head] == MAGIC and data[head + 64:head + 65] == b"\n"
    assert data[head:head + 64].decode() == hashlib.sha256(data[head + 65:]).hexdigest()


def test_every_single_flipped_byte_is_detected(tmp_path):
    want = make_ckpt(7, n=8)
    data = checkpoint.encode(want)
    assert_same(checkpoint.decode(data, "ok"), want)
    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 0x01
        with pytest.raises(UserError) as err:
            checkpoint.decode(bytes(bad), f"byte{i}")
        msg = str(err.value)
        assert msg.startswith(f"byte{i} ")
        if i >= len(MAGIC) + 65:  # inside the payload: the checksum catches it
            assert "corrupt or truncated (checksum mismatch)" in msg


def test_flipped_byte_on_disk_is_refused(tmp_path):
    path = checkpoint.save(tmp_path, make_ckpt(3, n=10_000), keep=3)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x80
    path.write_bytes(bytes(data))
    with pytest.raises(UserError, match="corrupt or truncated"):
        checkpoint.load(path)


@pytest.mark.parametrize("keep_bytes", [0, 5, len(MAGIC), len(MAGIC) + 30, len(MAGIC) + 65,
                                        "half", "minus1"])
def test_truncated_file_is_refused(tmp_path, keep_bytes):
    data = checkpoint.encode(make_ckpt(3, n=1000))
    cut = {"half": len(data) // 2, "minus1": len(data) - 1}.get(keep_bytes, keep_bytes)
    path = tmp_path / "step-0000000003.ckpt"
    path.write_bytes(data[:cut])
    with pytest.raises(UserError, match=str(path)):
        checkpoint.load(path)
    with pytest.raises(UserError, match="no usable checkpoint"):
        checkpoint.load_latest(tmp_path)


def test_load_latest_falls_back_to_the_previous_good_checkpoint_with_a_warning(
        tmp_path, capsys):
    for step in (10, 20, 30):
        checkpoint.save(tmp_path, make_ckpt(step), keep=5)
    capsys.readouterr()
    assert latest(tmp_path).step == 30
    assert capsys.readouterr().err == ""  # nothing to warn about

    newest = tmp_path / "step-0000000030.ckpt"
    newest.write_bytes(newest.read_bytes()[:-100])  # e.g. a disk that lost the tail
    got = latest(tmp_path)
    assert_same(got, make_ckpt(20))
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2, err
    assert err[0].startswith("warning: ") and "step-0000000030.ckpt" in err[0]
    assert "corrupt or truncated" in err[0]
    assert "resuming from the older checkpoint step-0000000020.ckpt" in err[1]

    (tmp_path / "step-0000000020.ckpt").write_bytes(b"garbage")
    assert_same(latest(tmp_path), make_ckpt(10))
    err = capsys.readouterr().err
    assert err.count("warning: ") == 3 and "step-0000000010.ckpt" in err

    (tmp_path / "step-0000000010.ckpt").write_bytes(b"")
    with pytest.raises(UserError) as e:
        checkpoint.load_latest(tmp_path)
    for step in (10, 20, 30):  # every problem is named in the error
        assert f"step-00000000{step}.ckpt" in str(e.value)


def test_load_latest_of_no_checkpoint_is_none(tmp_path, capsys):
    assert checkpoint.load_latest(tmp_path / "missing") is None
    assert checkpoint.load_latest(tmp_path) is None
    (tmp_path / "notes.txt").write_text("not a checkpoint name")
    (tmp_path / ".step-0000000005.ckpt.tmp-123").write_bytes(b"half a checkpoint")
    assert checkpoint.load_latest(tmp_path) is None  # other names are never read
    assert capsys.readouterr().err == ""


def test_keep_checkpoints_prunes_the_oldest_steps(tmp_path):
    for step in (9, 10, 99, 100, 1000, 5):  # name order must follow step order
        checkpoint.save(tmp_path, make_ckpt(step), keep=3)
    names = sorted(p.name for p in tmp_path.iterdir())
    # after 1000, keep {99, 100, 1000}; then 5 is written and is itself the oldest
    assert names == ["step-0000000099.ckpt", "step-0000000100.ckpt", "step-0000001000.ckpt"]
    assert [checkpoint.load(tmp_path / n).step for n in names] == [99, 100, 1000]
    checkpoint.save(tmp_path, make_ckpt(1001), keep=1)
    assert [p.name for p in tmp_path.iterdir()] == ["step-0000001001.ckpt"]


class Evil:
    """Unpickling this creates the directory ``path``: proof that code ran."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def good_arrays() -> dict:
    """The members of a valid payload."""
    return dict(theta=np.zeros(3, np.float32), adam_m=np.zeros(3, np.float32),
                adam_v=np.zeros(3, np.float32), counters=np.array([1, 1], np.int64),
                meta=np.frombuffer(b"{}", np.uint8))


@pytest.mark.parametrize("member", ["theta", "counters", "meta"])
def test_object_array_with_valid_checksum_is_refused_without_unpickling(tmp_path, member):
    marker = tmp_path / "code-ran"
    arrays = good_arrays()
    arrays[member] = np.array([Evil(marker)], dtype=object)
    payload = npz(**arrays)
    # the crafted payload really does run code when unpickled (so the test can fail) ...
    with np.load(io.BytesIO(payload), allow_pickle=True) as z:
        z[member]
    assert marker.is_dir()
    marker.rmdir()
    # ... but a checkpoint load refuses it, and nothing runs
    path = tmp_path / "step-0000000001.ckpt"
    path.write_bytes(craft(payload))
    with pytest.raises(UserError, match="valid checksum but unreadable content"):
        checkpoint.load(path)
    with pytest.raises(UserError, match="no usable checkpoint"):
        checkpoint.load_latest(tmp_path)
    assert not marker.exists()


def test_plain_pickle_with_valid_checksum_is_refused_without_unpickling(tmp_path):
    marker = tmp_path / "code-ran"
    payload = pickle.dumps({"theta": Evil(marker)})
    path = tmp_path / "step-0000000001.ckpt"
    path.write_bytes(craft(payload))
    with pytest.raises(UserError, match="unreadable content"):
        checkpoint.load(path)
    assert not marker.exists()
    pickle.loads(payload)  # control: this payload runs code when unpickled
    assert marker.is_dir()


def test_valid_checksum_with_missing_member_is_a_user_error(tmp_path):
    arrays = good_arrays()
    del arrays["adam_v"]
    with pytest.raises(UserError, match="unreadable content"):
        checkpoint.decode(craft(npz(**arrays)), "x")
    arrays = good_arrays()
    arrays["meta"] = np.frombuffer(b"{not json", np.uint8)
    with pytest.raises(UserError, match="unreadable content"):
        checkpoint.decode(craft(npz(**arrays)), "x")


def test_saving_the_same_step_again_leaves_only_that_checkpoint(tmp_path):
    checkpoint.save(tmp_path / "ck", make_ckpt(1), keep=2)
    checkpoint.save(tmp_path / "ck", make_ckpt(1), keep=2)  # overwrite the same step
    assert [p.name for p in (tmp_path / "ck").iterdir()] == ["step-0000000001.ckpt"]


def test_saving_holds_no_copy_of_the_state(tmp_path):
    """A chief saving a large network's checkpoint must not hold another copy of theta, m and
    v: the shards are written into the file as they are, not converted, joined or copied."""
    import tracemalloc

    n = 1_000_000  # 4 MB per vector
    ckpt = Checkpoint(step=5, theta=np.ones(n, np.float32), adam_m=np.ones(n, np.float32),
                      adam_v=np.ones(n, np.float32), adam_count=5, meta={})
    tracemalloc.start()
    try:
        checkpoint.save(tmp_path, ckpt, keep=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # a 1 MB read-back buffer for the checksum: 7.2 vectors with np.savez's joined arrays, 4.2
    # with its in-memory archive
    assert peak < 0.5 * 4 * n, peak / (4 * n)
    assert latest(tmp_path).theta.tolist() == ckpt.theta.tolist()


def test_a_state_saved_as_shards_is_the_file_of_the_whole_state(tmp_path):
    """Parameter servers' shards are written one after the other: the file is byte for byte
    the one the joined vectors give (and the same state always gives the same bytes)."""
    whole = make_ckpt(9, n=1001, seed=3)
    cut = [0, 1, 400, 1000, 1001]  # shards of different sizes, one of a single value

    def shards(v: np.ndarray) -> list[np.ndarray]:
        return [v[lo:hi] for lo, hi in zip(cut, cut[1:])]

    vectors = (shards(whole.theta), shards(whole.adam_m), shards(whole.adam_v))
    path = checkpoint.save_state(tmp_path, 9, vectors, whole.adam_count, whole.meta, keep=1)
    assert path.read_bytes() == checkpoint.encode(whole) == checkpoint.encode(whole)
    got = checkpoint.load(path)
    for name in ("theta", "adam_m", "adam_v"):
        assert np.array_equal(bits(getattr(got, name)), bits(getattr(whole, name)))
    assert (got.step, got.adam_count, got.meta) == (9, whole.adam_count, whole.meta)
