"""The run directory and the sweep directory: every file name and format, their readers and
writers, and the resume rule, in one place.

```
RUN_DIR/
  config.yaml      the resolved config of the run's latest start (YAML)
  config_history.jsonl  one JSON object per resume that changed the config: the step, the time,
                   each key's old and new value (see "The config of a resumed run" below)
  metrics.jsonl    one JSON object per logged step
  eval.jsonl       one JSON object per finished evaluation (dba3c.games.scores.score_stats)
  summary.json     one JSON object: time_to_target_s, final_step, stop_reason, ...
  tb/              TensorBoard event files (written by dba3c/training/metrics.py)
  checkpoints/     step-NNNNNNNNNN.ckpt (their format: dba3c/training/checkpoint.py)
  run.lock         while a run trains: who holds the directory (dba3c/training/lock.py)
  sweep.log        the run's output, when a local sweep ran it
SWEEP_DIR/
  sweep.csv        one row per grid point: run_dir, the grid keys, RESULT_COLUMNS
  NNN-KEY_VALUE-.../  one run directory per grid point
  submitit/JOB_ID/ submitit's logs, when Slurm ran the sweep
```

Whole files are written atomically (:func:`atomic_file`, :func:`write_atomic`). JSON-lines
files grow a line at a time, so a crash leaves at most a torn last line: :func:`read_jsonl`
skips it and resuming (:meth:`RunDir.truncate_logs`) removes it with every line past the
resumed step. A write that finds the file system full raises :class:`DiskFull`, naming the
file and the space left: the files written before stay whole.

The config of a resumed run: a run resumed from a checkpoint is compared with the config that
trained it (``config.yaml``; the checkpoint's copy if that file is missing or unreadable) by
:func:`config_changes`. The keys of :data:`OPERATIONAL_KEYS` (when it stops, what it logs,
where and how often it writes and evaluates, how fast its ranks run) may change; a change of
any other key is refused (:func:`resume_refusal`) unless ``run.allow_changes`` names it. An
accepted change is appended to ``config_history.jsonl`` (:meth:`RunDir.create`) before
``config.yaml`` is replaced, so ``config.yaml`` says what trains the run now and the history
what trained it before, and from which step.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import math
import os
import shutil
import sys
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from dba3c.config import Config, dump_yaml, load_yaml
from dba3c.errors import TrainingError

CONFIG = "config.yaml"
CONFIG_HISTORY = "config_history.jsonl"
METRICS = "metrics.jsonl"
EVALS = "eval.jsonl"
SUMMARY = "summary.json"
TENSORBOARD = "tb"
CHECKPOINTS = "checkpoints"
LOCK = "run.lock"
TAKEOVER = ".run.lock.takeover"  # held while a run replaces a lock kept by a run that is over
SWEEP_LOG = "sweep.log"
SWEEP_CSV = "sweep.csv"
SUBMITIT = "submitit"
# sweep.csv columns after run_dir and the grid keys
RESULT_COLUMNS = ("data_points_per_s", "time_to_target_s", "final_eval_mean", "status")


class RunDir:
    """The files of one run directory; nothing is read or created until asked.

    Attributes: ``path`` the directory; ``config_path``, ``config_history_path``,
    ``metrics_path``, ``evals_path``, ``summary_path``, ``tensorboard_dir``,
    ``checkpoints_dir``, ``lock_path``,
    ``takeover_path`` and ``sweep_log_path`` (the run's output when a local sweep ran it)
    the paths in it.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.config_path = self.path / CONFIG
        self.config_history_path = self.path / CONFIG_HISTORY
        self.metrics_path = self.path / METRICS
        self.evals_path = self.path / EVALS
        self.summary_path = self.path / SUMMARY
        self.tensorboard_dir = self.path / TENSORBOARD
        self.checkpoints_dir = self.path / CHECKPOINTS
        self.lock_path = self.path / LOCK
        self.takeover_path = self.path / TAKEOVER
        self.sweep_log_path = self.path / SWEEP_LOG

    def is_run(self) -> bool:
        """Whether the directory holds a run (it has ``metrics.jsonl``)."""
        return self.metrics_path.is_file()

    def create(self, cfg: Config, step: int = 0, changes: Sequence[ConfigChange] = ()) -> None:
        """Make the directory (and its parents) and write ``config.yaml`` for ``cfg``; a run
        resumed at ``step`` with ``changes`` (:func:`config_changes`, already accepted) first
        appends them to ``config_history.jsonl``."""
        self.path.mkdir(parents=True, exist_ok=True)
        if changes:
            history = JsonlWriter(self.config_history_path)
            try:
                history.write({"step": step,
                               "time": datetime.now(UTC).isoformat(timespec="seconds"),
                               "changes": [asdict(c) for c in changes]})
            finally:
                history.close()
        write_atomic(self.config_path, dump_yaml(cfg).encode())

    def config_changes(self, cfg: Config, fallback: dict) -> list[ConfigChange]:
        """What ``cfg`` changes in the config that trained the run (:func:`config_changes`):
        ``config.yaml``, or ``fallback`` (the resumed checkpoint's copy) when that file is
        missing or unreadable (said on stderr)."""
        try:
            recorded = self.read_config()
        except (ValueError, OSError) as e:
            print(f"warning: {e}; comparing the config with the checkpoint's copy",
                  file=sys.stderr, flush=True)
            recorded = {}
        return config_changes(recorded or fallback, cfg.to_dict())

    def read_config_history(self) -> list[dict]:
        """The records of ``config_history.jsonl`` (see :func:`read_jsonl`); none when
        absent."""
        if not self.config_history_path.is_file():
            return []
        return read_jsonl(self.config_history_path)

    def resumed_summary(self, step: int, saved: dict) -> dict:
        """The summary a run resumed at ``step`` goes on from: ``summary.json`` when it
        records that very step (its ``final_step``: it then holds what the checkpoint's copy
        ``saved`` holds and the evaluations that finished after the checkpoint was written,
        such as the final one), else ``saved``."""
        try:
            recorded = self.read_summary()
        except (ValueError, OSError):
            return dict(saved)
        return recorded if recorded.get("final_step") == step else dict(saved)

    def truncate_logs(self, max_step: int) -> None:
        """The resume rule: drop the metrics and evaluation lines past ``max_step`` (work
        after the checkpoint being resumed, about to be redone) and torn lines."""
        for path in (self.metrics_path, self.evals_path):
            truncate_jsonl(path, max_step)

    def read_config(self) -> dict:
        """The nested config in ``config.yaml``; empty when absent. ValueError when it is
        not a YAML mapping."""
        if not self.config_path.is_file():
            return {}
        try:
            value = load_yaml(self.config_path.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            raise ValueError(f"{self.config_path}: cannot be parsed: "
                             f"{' '.join(str(e).split())}") from None
        return _mapping(self.config_path, value)

    def read_metrics(self) -> list[dict]:
        """The records of ``metrics.jsonl`` (see :func:`read_jsonl`); none when absent."""
        return read_jsonl(self.metrics_path) if self.metrics_path.is_file() else []

    def read_evals(self) -> list[dict]:
        """The records of ``eval.jsonl`` (see :func:`read_jsonl`); none when absent.
        ValueError naming the line of a record :func:`eval_record_problem` refuses."""
        if not self.evals_path.is_file():
            return []
        return read_jsonl(self.evals_path, eval_record_problem)

    def read_summary(self) -> dict:
        """The object in ``summary.json``; empty when absent. ValueError when it is not a
        JSON object."""
        if not self.summary_path.is_file():
            return {}
        try:
            value = json.loads(self.summary_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{self.summary_path}: cannot be parsed: {e}") from None
        return _mapping(self.summary_path, value)

    def write_summary(self, summary: dict) -> None:
        """Replace ``summary.json`` atomically; values JSON has no type for (e.g. NumPy
        scalars) are written as text, non-finite ones as null."""
        text = json.dumps(summary, indent=1, default=_json_default)
        write_atomic(self.summary_path, text.encode())

    def last_step(self, tail_bytes: int = 8192) -> int:
        """The step of the newest readable line of ``metrics.jsonl``, reading only its last
        ``tail_bytes`` (cheap on a live run); 0 before the first."""
        if not self.metrics_path.is_file():
            return 0
        with open(self.metrics_path, "rb") as f:
            f.seek(max(0, self.metrics_path.stat().st_size - tail_bytes))
            lines = f.read().split(b"\n")
        for line in reversed(lines):
            record = _parse(line)
            if record is not None and isinstance(record.get("step"), int):
                return record["step"]
        return 0


class SweepDir:
    """The files of one sweep directory: ``path``, ``csv_path`` its ``sweep.csv`` and
    ``submitit_dir`` the folder of submitit's logs when Slurm runs the sweep."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.csv_path = self.path / SWEEP_CSV
        self.submitit_dir = self.path / SUBMITIT

    def is_sweep(self) -> bool:
        """Whether the directory holds a sweep (it has ``sweep.csv``)."""
        return self.csv_path.is_file()

    def read_rows(self) -> list[dict]:
        """The rows of ``sweep.csv`` as dicts of strings (``run_dir`` as written: relative to
        the sweep directory or absolute); none when absent. ValueError if ``run_dir`` or
        ``status`` is not a column."""
        if not self.is_sweep():
            return []
        with open(self.csv_path, newline="", encoding="utf-8") as file:
            reader = csv.DictReader(file)
            missing = [c for c in ("run_dir", "status") if c not in (reader.fieldnames or [])]
            if missing:
                raise ValueError(f"{self.csv_path}: missing column(s) {', '.join(missing)}")
            return list(reader)

    def write_rows(self, keys: list[str], rows: list[dict]) -> None:
        """Replace ``sweep.csv`` atomically: columns run_dir, ``keys`` (the grid keys), then
        :data:`RESULT_COLUMNS`; None is written as an empty cell."""
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, ["run_dir", *keys, *RESULT_COLUMNS])
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in row.items()})
        write_atomic(self.csv_path, text.getvalue().encode("utf-8"))


# ---- the config of a resumed run ---------------------------------------------------------

# The keys a resumed run may change freely: when it stops, what it logs and shows, where and
# how often it writes checkpoints, how often and how many games at once it evaluates, and how
# fast its ranks run the same steps (threads, polling, timeouts, the order of a collective's
# messages, fault injection that delays or fails a rank, synthetic ranks' timing). Every other
# key, and any key the schema gains later, changes what the run learns (model, game and
# emulation, optimizer and rates, seed, batch sizes, the distributed layout, debug.nan_*) or
# what its evaluations measure (eval.protocol, episodes, greedy, no-op starts, frame cap,
# target score): a resume that changes one is refused unless run.allow_changes names it.
OPERATIONAL_KEYS = frozenset({
    # when it stops (train.max_steps not with train.lr_schedule=linear: it sets the decay)
    "train.max_steps", "train.max_seconds", "train.max_nonfinite", "eval.stop_at_target",
    # logging and display; where and how often it writes
    "run.dir", "run.log_every", "run.progress", "run.wandb", "run.wandb_project",
    "run.wandb_mode", "run.checkpoint_every", "run.keep_checkpoints", "run.allow_changes",
    # evaluation cadence and cost
    "eval.every", "eval.at_end", "eval.stop_below_target", "eval.num_envs",
    "eval.probe_frames", "eval.stop_if_dead",
    # threads, polling, timeouts and the scheduling of the same synchronous update
    "env.num_threads", "env.nice", "train.intra_op_threads", "train.inter_op_threads",
    "dist.stall_timeout", "dist.poll_max_ms", "dist.collective_poll_us",
    "dist.collective_algorithm", "dist.collective_overlap", "dist.replicate_first_bucket",
    "dist.overlap_probe_steps", "dist.overlap_probe_every", "dist.overlap_cost",
    # fault injection that delays or fails a rank
    "debug.slow_rank", "debug.slow_seconds", "debug.fail_rank", "debug.fail_step",
    # synthetic ranks' compute time
    "synthetic.compute_ms", "synthetic.jitter", "synthetic.slow_workers",
    "synthetic.slow_factor",
})


@dataclass(frozen=True)
class ConfigChange:
    """A key whose value differs between the config that trained a run (``old``) and the one
    it resumes with (``new``); ``learning``: whether the change alters what the run learns
    (see :data:`OPERATIONAL_KEYS`)."""

    key: str
    old: Any
    new: Any
    learning: bool

    def __str__(self) -> str:
        return f"{self.key} from {_shown(self.old)} to {_shown(self.new)}"


def config_changes(old: dict, new: dict) -> list[ConfigChange]:
    """Every key whose value differs between the nested configs ``old`` (a run's
    ``config.yaml``) and ``new``, in the schema's order. A key ``old`` lacks (written before
    the schema had it) holds its default; keys the schema no longer has are left out."""
    defaults = _flat(Config().to_dict())
    before, after = {**defaults, **_flat(old)}, {**defaults, **_flat(new)}
    return [ConfigChange(key, before[key], after[key], _is_learning(key, before, after))
            for key in defaults if not _same(before[key], after[key])]


def resume_refusal(path: str | Path, step: int, changes: Sequence[ConfigChange],
                   allowed: Collection[str]) -> str | None:
    """The one-line refusal of resuming the run in ``path`` at ``step`` with ``changes``:
    every learning change ``allowed`` (``run.allow_changes``) does not name, with its old
    and new value; None when there is none."""
    learning = [c for c in changes if c.learning]
    refused = [c for c in learning if c.key not in allowed]
    if not refused:
        return None
    return (f"{path} was trained to step {step} with another config; resuming it would change "
            f"what it learns: {', '.join(map(str, refused))}. Resume with the run's values "
            f"(its {CONFIG}), use a new run.dir, or allow the change with "
            f"run.allow_changes={','.join(c.key for c in learning)} (recorded in its "
            f"{CONFIG_HISTORY})")


def _flat(tree: dict) -> dict[str, Any]:
    """``{"train": {"lr": x}}`` -> ``{"train.lr": x}``."""
    return {f"{section}.{key}": value for section, values in tree.items()
            if isinstance(values, dict) for key, value in values.items()}


def _same(a: Any, b: Any) -> bool:
    """Equal values of one type (an integer for a float key, as YAML may write it, is the
    same number; true is not 1)."""
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _is_learning(key: str, before: dict[str, Any], after: dict[str, Any]) -> bool:
    if key == "train.max_steps":  # a linear rate decays to 0 at train.max_steps
        return "linear" in (before.get("train.lr_schedule"), after.get("train.lr_schedule"))
    return key not in OPERATIONAL_KEYS


def _shown(value: Any) -> str:
    """A config value as an override writes it: true, 0.001, 'pong'."""
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, str) else str(value)


# ---- JSON lines ---------------------------------------------------------------------------


def read_jsonl(path: Path, check: Callable[[dict], str | None] | None = None) -> list[dict]:
    """The JSON objects of a JSON-lines file, skipping blank lines and a torn last line (one
    without a newline that does not parse: a write in progress, or cut short by a crash).

    Raises ValueError naming the file and line number of any other line that is not a JSON
    object, or whose object ``check`` finds a problem with (``check(record)``: the problem,
    e.g. ``has mean="x", not a number``; None when there is none).
    """
    path = Path(path)
    lines = path.read_bytes().split(b"\n")  # the last item follows the last newline
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(_text(line))
        except json.JSONDecodeError as e:
            if number == len(lines):  # torn
                continue
            raise ValueError(f"{path}: line {number} is not valid JSON ({e.msg})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}: line {number} is not a JSON object")
        if check is not None and (problem := check(record)) is not None:
            raise ValueError(f"{path}: line {number} {problem}")
        records.append(record)
    return records


# the numbers of an eval.jsonl record (dba3c.games.scores.score_stats, with step and time)
EVAL_NUMBERS = ("step", "time_s", "mean", "max", "min", "std", "episodes", "hns")


def eval_record_problem(record: dict) -> str | None:
    """What is wrong with an ``eval.jsonl`` record, for :func:`read_jsonl`: no ``mean``
    (what every reader takes), or one of :data:`EVAL_NUMBERS` that is not a number."""
    if "mean" not in record:
        return "has no mean (the mean score of the evaluation)"
    for key in EVAL_NUMBERS:
        value = record.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"has {key}={json.dumps(value)}, not a number"
    return None


def truncate_jsonl(path: Path, max_step: int) -> None:
    """Drop lines with ``step > max_step`` (work after the checkpoint being resumed, which is
    about to be redone), so the step sequence has no repeats, and lines that do not parse (a
    tail torn by a crash). Atomic; nothing happens when the file is absent."""
    path = Path(path)
    if not path.exists():
        return
    kept = [line for line in path.read_bytes().split(b"\n")
            if (record := _parse(line)) is not None and record.get("step", 0) <= max_step]
    write_atomic(path, b"".join(line + b"\n" for line in kept))


class JsonlWriter:
    """Appends one JSON object per line, each with one unbuffered write: nothing waits in a
    buffer, so a full disk fails the write that found it (:class:`DiskFull`) and no later
    one."""

    def __init__(self, path: Path):
        self.path = Path(path)
        with disk_space_checked(self.path):
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, record: dict) -> None:
        """Append ``record`` (non-finite floats become null)."""
        line = memoryview((json.dumps({k: _clean(v) for k, v in record.items()}) + "\n")
                          .encode())
        with disk_space_checked(self.path):
            while line:
                line = line[os.write(self._fd, line):]

    def close(self) -> None:
        """Close the file."""
        os.close(self._fd)


def _text(line: bytes) -> str:
    """A line's text; bytes that are not UTF-8 become U+FFFD."""
    return line.decode("utf-8", errors="replace")


def _parse(line: bytes) -> dict | None:
    """The JSON object on a line; None for anything else (blank, torn, not an object)."""
    try:
        record = json.loads(_text(line))
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _mapping(path: Path, value: object) -> dict:
    """``value`` (parsed from ``path``) when it is a mapping, {} for an empty file."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a mapping, found {type(value).__name__}")
    return value


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _json_default(x: object) -> str | None:
    return None if isinstance(x, float) and not math.isfinite(x) else str(x)


# ---- atomic files -------------------------------------------------------------------------


class DiskFull(TrainingError):
    """A write found its file system full (or the quota used up): the message names the
    file, the space left and how to go on."""

    def __init__(self, path: Path, error: OSError):
        self.path = Path(path)
        free = shutil.disk_usage(_existing_parent(self.path)).free
        super().__init__(f"cannot write {self.path}: {error.strerror} ({_size(free)} free on "
                         f"its file system); what was written before is intact: free space "
                         f"and run the same command again to resume from the newest "
                         f"checkpoint")


@contextmanager
def disk_space_checked(path: Path) -> Iterator[None]:
    """Turn a full file system (ENOSPC, EDQUOT) met while writing ``path`` into
    :class:`DiskFull`."""
    try:
        yield
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise DiskFull(path, e) from None


def _existing_parent(path: Path) -> Path:
    while not path.exists():
        path = path.parent
    return path


def _size(n: int) -> str:
    """``n`` bytes for people: 812 B, 12.5 KiB, 3.4 MiB, 1.2 GiB."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    power = 0
    while power < len(units) - 1 and n >= 1024 ** (power + 1):
        power += 1
    return f"{n} B" if power == 0 else f"{n / 1024 ** power:.3g} {units[power]}"


@contextmanager
def atomic_file(path: Path) -> Iterator[io.BufferedRandom]:
    """A file opened ``w+b`` whose content replaces ``path`` only once the block ends without
    an exception, so that readers see the old file or the whole new one: a temporary file in
    the same directory, fsynced, renamed over ``path``, directory fsynced. A failure leaves
    the old file and no temporary file; a full disk is :class:`DiskFull`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with disk_space_checked(path):
        try:
            with open(tmp, "w+b") as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_atomic(path: Path, *chunks: bytes | memoryview) -> None:
    """Write ``chunks`` one after the other to ``path`` atomically (:func:`atomic_file`)."""
    with atomic_file(path) as f:
        for chunk in chunks:
            f.write(chunk)


def remove_stale_temporaries(directory: Path, name_glob: str) -> None:
    """Delete the temporary files that :func:`atomic_file` left for files named like
    ``name_glob`` in ``directory`` when its process was killed mid-write."""
    for stale in Path(directory).glob(f".{name_glob}.tmp-*"):
        stale.unlink(missing_ok=True)


# what every point of dba3c bench scale's scale.json has, measured or failed (a measured one
# has step_ms etc.)
SCALE_POINT_KEYS = frozenset({"workers", "ps", "hidden", "replicas", "slow_workers",
                              "slow_factor", "link_gbit", "time_scale"})


def read_scale_results(path: Path) -> dict:
    """The results ``dba3c bench scale`` wrote to ``path`` (JSON with measured points);
    ValueError naming the file unless it holds them."""
    try:
        results = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not readable as dba3c bench scale results: {e}") from None
    if not isinstance(results, dict) or not isinstance(results.get("points"), list) or any(
            not isinstance(p, dict) or not SCALE_POINT_KEYS <= p.keys() for p in
            results["points"]):
        raise ValueError(f"{path}: not dba3c bench scale results (expected an object whose "
                         f"'points' each have {', '.join(sorted(SCALE_POINT_KEYS))})")
    return results
