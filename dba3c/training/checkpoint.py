"""Checkpoints: atomic, checksummed, never unpickled.

A checkpoint file is ``MAGIC``, the SHA-256 of the payload in hex, a newline, and the payload:
an uncompressed ``.npz`` of plain numeric arrays plus one JSON document (as bytes). Writing goes
through :func:`dba3c.training.rundir.atomic_file` (a temporary file in the same directory, fsynced,
renamed over the final name, the directory fsynced), so a crash at any point leaves either the
old set of files or the new one.
Loading verifies the checksum and uses ``allow_pickle=False``.

The loading rules live here too: where a run starts (:func:`load_start`: the newest valid
checkpoint, else a seeded initialisation), which checkpoint and config ``dba3c evaluate``
uses (:func:`load_for_evaluation`), and that a checkpoint fits the network
(:func:`check_layout`).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dba3c.config import Config
from dba3c.errors import UserError
from dba3c.learning.models import NetSpec
from dba3c.learning.params import ParamLayout
from dba3c.learning.rules import OptimizerState
from dba3c.preset import apply_overrides, from_dict
from dba3c.training.rundir import (
    ConfigChange,
    RunDir,
    atomic_file,
    disk_space_checked,
    remove_stale_temporaries,
    resume_refusal,
)

MAGIC = b"DBA3C-CHECKPOINT-1\n"
NAME = re.compile(r"^step-(\d{10})\.ckpt$")


def checkpoint_due(every: int, step: int, start_step: int) -> bool:
    """Whether the state at ``step`` is written: every ``every`` steps (``run.checkpoint_every``,
    0 = never), past the step the run started from."""
    return bool(every) and step % every == 0 and step > start_step


@dataclass
class Checkpoint:
    """Everything needed to resume bit-exactly.

    theta, adam_m, adam_v: float32 [N]; adam_count: optimizer updates applied (the shard
    state of :mod:`dba3c.learning.optim`: RMSProp keeps its mean square in adam_v, adam_m stays
    zero);
    step: global step;
    meta: JSON-able dict (config, parameter layout, seed, wall time so far, ...).
    """

    step: int
    theta: np.ndarray
    adam_m: np.ndarray
    adam_v: np.ndarray
    adam_count: int
    meta: dict


def checkpoint_path(directory: Path, step: int) -> Path:
    """The file name of the checkpoint at ``step``."""
    return Path(directory) / f"step-{step:010d}.ckpt"


VECTORS = ("theta", "adam_m", "adam_v")
Shards = Sequence[np.ndarray]  # one float32 vector as its consecutive shards (or one piece)
FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # zip entries' date: the same state gives the same bytes


def write(f: io.BufferedIOBase, step: int, vectors: tuple[Shards, Shards, Shards], adam_count: int,
          meta: dict) -> None:
    """Write a checkpoint file to ``f`` (opened ``w+b``, at its start).

    vectors: theta, adam_m, adam_v, each as consecutive float32 shards, written one after the
    other into the npz entry without being joined or copied (a chief saving a large network
    holds no second copy of the state). The payload's SHA-256 goes into the header afterwards,
    from the bytes read back.
    """
    f.write(MAGIC + b"0" * 64 + b"\n")
    start = f.tell()
    with zipfile.ZipFile(f, "w") as z:
        for name, shards in zip(VECTORS, vectors):
            _write_npy(z, name, [np.asarray(s, np.float32) for s in shards])
        _write_npy(z, "counters", [np.array([step, adam_count], np.int64)])
        _write_npy(z, "meta", [np.frombuffer(json.dumps(meta).encode(), np.uint8)])
    f.seek(start)
    digest, chunk = hashlib.sha256(), bytearray(1 << 20)
    while n := f.readinto(chunk):
        digest.update(memoryview(chunk)[:n])
    f.seek(len(MAGIC))
    f.write(digest.hexdigest().encode())


def _write_npy(z: zipfile.ZipFile, name: str, shards: Shards) -> None:
    """One ``.npy`` entry holding the 1-D concatenation of ``shards`` (all of one dtype)."""
    header = {"descr": np.lib.format.dtype_to_descr(shards[0].dtype), "fortran_order": False,
              "shape": (sum(s.size for s in shards),)}
    with z.open(zipfile.ZipInfo(f"{name}.npy", FIXED_TIME), "w", force_zip64=True) as entry:
        np.lib.format.write_array_header_1_0(entry, header)
        for s in shards:
            entry.write(np.ascontiguousarray(s).data)


def encode(ckpt: Checkpoint) -> bytes:
    """The checkpoint file's bytes."""
    buf = io.BytesIO()
    write(buf, ckpt.step, ([ckpt.theta], [ckpt.adam_m], [ckpt.adam_v]), ckpt.adam_count,
          ckpt.meta)
    return buf.getvalue()


def decode(data: bytes, source: str) -> Checkpoint:
    """Parse and verify checkpoint bytes; UserError naming ``source`` if they are not one."""
    if not data.startswith(MAGIC):
        raise UserError(f"{source} is not a dba3c checkpoint (bad header)")
    head = len(MAGIC)
    digest, payload = data[head:head + 64], data[head + 65:]
    if data[head + 64:head + 65] != b"\n" or \
            hashlib.sha256(payload).hexdigest().encode() != digest:
        raise UserError(f"{source} is corrupt or truncated (checksum mismatch)")
    try:
        with np.load(io.BytesIO(payload), allow_pickle=False) as z:
            step, count = (int(x) for x in z["counters"])
            return Checkpoint(step, z["theta"], z["adam_m"], z["adam_v"], count,
                              json.loads(z["meta"].tobytes().decode()))
    except (ValueError, KeyError, OSError, json.JSONDecodeError) as e:
        raise UserError(f"{source} has a valid checksum but unreadable content: {e}") from None


def save(directory: Path, ckpt: Checkpoint, keep: int) -> Path:
    """Write the checkpoint atomically, then delete all but the newest ``keep``."""
    return save_state(directory, ckpt.step, ([ckpt.theta], [ckpt.adam_m], [ckpt.adam_v]),
                      ckpt.adam_count, ckpt.meta, keep)


def save_state(directory: Path, step: int, vectors: tuple[Shards, Shards, Shards],
               adam_count: int, meta: dict, keep: int) -> Path:
    """Write the state at ``step`` (theta, adam_m, adam_v as shards, see :func:`write`)
    atomically, then delete all but the newest ``keep`` checkpoints."""
    directory = Path(directory)
    path = checkpoint_path(directory, step)
    with disk_space_checked(path):
        directory.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as f:
        write(f, step, vectors, adam_count, meta)
    for old in list_checkpoints(directory)[keep:]:
        old.unlink(missing_ok=True)
    remove_stale_temporaries(directory, "step-*.ckpt")  # left by a process killed mid-write
    return path


def list_checkpoints(directory: Path) -> list[Path]:
    """Checkpoint files in ``directory``, newest step first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [p for p in directory.iterdir() if NAME.match(p.name)]
    return sorted(found, key=lambda p: p.name, reverse=True)


def load(path: Path) -> Checkpoint:
    """Read and verify one checkpoint file."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise UserError(f"cannot read checkpoint {path}: {e.strerror}") from None
    return decode(data, str(path))


def load_latest(directory: Path) -> Checkpoint | None:
    """The newest valid checkpoint; corrupt ones are reported on stderr and skipped.
    None when there is none at all; UserError when every one is corrupt."""
    paths = list_checkpoints(directory)
    problems = []
    for path in paths:
        try:
            ckpt = load(path)
        except UserError as e:
            problems.append(str(e))
            print(f"warning: {e}; trying an older checkpoint", file=sys.stderr)
            continue
        if problems:
            print(f"warning: resuming from the older checkpoint {path.name}", file=sys.stderr)
        return ckpt
    if problems:
        raise UserError(f"no usable checkpoint in {directory}: " + "; ".join(problems))
    return None


def load_path(path: str) -> Checkpoint:
    """A checkpoint file, or the newest valid checkpoint of a run directory."""
    p = Path(path)
    if p.is_file():
        return load(p)
    if p.is_dir():
        run = RunDir(p)
        ckpt = load_latest(run.checkpoints_dir if run.checkpoints_dir.is_dir() else p)
        if ckpt is None:
            raise UserError(f"{path} holds no checkpoint (expected a run directory with "
                            f"{run.checkpoints_dir.name}/ or a step-*.ckpt file)")
        return ckpt
    raise UserError(f"{path} not found: expected a checkpoint file or a run directory")


def load_for_evaluation(path: str, overrides: list[str]) -> tuple[Checkpoint, Config]:
    """A checkpoint file or a run directory's newest checkpoint, and the config stored in it
    with ``overrides`` applied."""
    ckpt = load_path(path)
    source = f"the config stored in checkpoint step {ckpt.step}"
    return ckpt, apply_overrides(from_dict(ckpt.meta.get("config", {}), source), overrides,
                                 source)


def check_layout(ckpt: Checkpoint, cfg: Config, layout: ParamLayout, where: str,
                 hint: str) -> None:
    """UserError unless the checkpoint holds parameters of exactly this network."""
    if ckpt.meta.get("layout") != layout.to_dict():
        raise UserError(
            f"checkpoint step {ckpt.step} {where} holds a model with {ckpt.theta.size} "
            f"parameters that does not match model.kind={cfg.model.kind} "
            f"model.hidden={cfg.model.hidden} env.id={cfg.env.id} ({layout.num_params} "
            f"parameters); {hint}")


@dataclass
class StartState:
    """Where training starts: a fresh initialisation or a checkpoint, and what the config
    changes in the one that trained the checkpoint (``changes``, accepted: see
    :func:`load_start`)."""

    step: int
    theta: np.ndarray
    opt_state: OptimizerState
    ckpt: Checkpoint | None
    changes: list[ConfigChange] = field(default_factory=list)


def load_start(cfg: Config, spec: NetSpec) -> StartState:
    """Resume from the run directory's newest valid checkpoint, or initialise (seeded).

    A resume is refused (UserError) when the checkpoint holds another network or optimizer
    state, or when ``cfg`` changes what the run learns (a key outside
    :data:`~dba3c.training.rundir.OPERATIONAL_KEYS`) without ``run.allow_changes`` naming
    it (:func:`~dba3c.training.rundir.resume_refusal`); nothing is written here."""
    run = RunDir(cfg.run.dir)
    ckpt = load_latest(run.checkpoints_dir)
    layout = spec.layout()
    if ckpt is None:
        return StartState(0, spec.init_params(cfg.run.seed, cfg.model.init),
                          OptimizerState.zeros(layout.num_params), None)
    check_layout(ckpt, cfg, layout, f"in {cfg.run.dir}",
                 "use the run's own config or a new run.dir")
    # m and v hold Adam's moments or RMSProp's mean square: another rule would misread them
    kind = ckpt.meta.get("config", {}).get("optim", {}).get("kind", "adam")
    if kind != cfg.optim.kind:
        raise UserError(f"checkpoint step {ckpt.step} in {cfg.run.dir} holds the state of "
                        f"optim.kind={kind}, not of optim.kind={cfg.optim.kind}; resume with "
                        f"optim.kind={kind} or use a new run.dir")
    changes = run.config_changes(cfg, ckpt.meta.get("config", {}))
    refusal = resume_refusal(run.path, ckpt.step, changes, cfg.run.allowed_changes)
    if refusal:
        raise UserError(refusal)
    return StartState(ckpt.step, ckpt.theta.copy(),
                      OptimizerState(ckpt.adam_m.copy(), ckpt.adam_v.copy(), ckpt.adam_count),
                      ckpt, changes)
