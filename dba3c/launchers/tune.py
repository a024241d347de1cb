"""``dba3c tune CONFIG``: the fastest one-process setting of this node, measured.

    dba3c tune configs/breakout.yaml --seconds 300 --write node.yaml
    dba3c train configs/breakout_64.yaml --overrides node.yaml     # any preset takes it

Each trial is a fresh ``dba3c train`` process (evaluation and checkpoints off) whose
steady-state data points/s :func:`dba3c.launchers.trial.run_training` reads, for one setting
of ``env.num_envs``, ``env.batch_size`` and TensorFlow's intra/inter-op threads, chosen by
the coordinate descent of :mod:`dba3c.launchers.tune_search` within ``--seconds``. Every
measured trial goes to a state file (this module owns its format); a re-run with the same
config and overrides takes them from there instead of measuring again, so an interrupted or
budget-bound search goes on where it stopped.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import yaml

from dba3c.config import Config
from dba3c.cpus import bound_cpus, machine_description
from dba3c.errors import UserError
from dba3c.launchers.trial import run_training
from dba3c.launchers.tune_search import (
    STARTUP_S,
    TUNED_KEYS,
    CoordinateDescent,
    Measure,
    SearchOutcome,
    Setting,
    default_trial_seconds,
    make_candidates,
    make_setting,
    planned_trials,
    search,
    setting_overrides,
    start_values,
)
from dba3c.outputs import check_output_file
from dba3c.preset import apply_overrides, load_config
from dba3c.training.rundir import write_atomic

STATE_FORMAT = "dba3c-tune-state/1"


def default_state_path(config: str) -> Path:
    """``runs/tune/tune-<config stem>.json``: with the other outputs, not in the checkout's
    tracked files."""
    return Path("runs") / "tune" / f"tune-{Path(config).stem}.json"


def state_identity(cfg: Config, num_cpus: int) -> dict:
    """What a state file's trials depend on: the resolved config (config file and overrides
    together) and the node's cores."""
    return {"config": cfg.to_dict(), "num_cpus": num_cpus}


def read_state(path: Path, identity: dict) -> dict[Setting, float | None]:
    """The trials of an earlier run from the state file at ``path`` ({} when there is none);
    a UserError when it is malformed or was written for another config or node."""
    if not path.exists():
        return {}
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"format {state.get('format')!r}, expected {STATE_FORMAT!r}")
        trials = {make_setting({k: int(t["setting"][k]) for k in TUNED_KEYS}):
                  (None if t["data_points_per_s"] is None else float(t["data_points_per_s"]))
                  for t in state["trials"]}
        written_for = " ".join(map(str, [state["config"], *state["overrides"]]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UserError(f"state file {path} is not a dba3c tune state ({e}); delete it or "
                        f"pass another --state FILE") from None
    if state.get("identity") != identity:
        raise UserError(f"state file {path} holds trials of another config, overrides or node "
                        f"(of dba3c tune {written_for}); delete it or pass another --state "
                        f"FILE")
    return trials


def write_state(path: Path, config: str, overrides: list[str], identity: dict,
                trials: dict[Setting, float | None], trial_s: float) -> None:
    """Every trial so far (setting -> data points/s, None: failed) into the state file at
    ``path`` (atomically)."""
    state = {"format": STATE_FORMAT, "config": config, "overrides": list(overrides),
             "identity": identity,
             "trials": [{"setting": dict(s), "data_points_per_s": rate}
                        for s, rate in trials.items()],
             "trial_seconds": trial_s}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, (json.dumps(state, indent=1) + "\n").encode())


def make_measure(config: str, overrides: list[str]) -> Measure:
    """Steady-state data points/s of a fresh one-process ``dba3c train`` with a setting's
    overrides for a number of seconds (None, with a line on stderr, when it fails)."""

    def measure(setting: Setting, seconds: float) -> float | None:
        try:
            return run_training(config, [*overrides, *setting_overrides(setting)], 0,
                                seconds)["data_points_per_s"]
        except RuntimeError as e:
            print(f"tune: trial failed: {str(e).strip().splitlines()[-1]}", file=sys.stderr,
                  flush=True)
            return None

    return measure


def _rate(rate: float | None) -> str:
    return "failed" if rate is None else f"{rate:.0f}"


def report(outcome: SearchOutcome) -> str:
    """The table of every trial, the best setting with its data points/s, and the overrides
    to paste."""
    widths = [max(len(k), 6) for k in TUNED_KEYS]
    head = "  ".join(["trial", *(k.rjust(w) for k, w in zip(TUNED_KEYS, widths)),
                      "data points/s"])
    rows = [head]
    for k, (setting, rate, fresh) in enumerate(outcome.trials, 1):
        mark = ("  <- best" if setting == outcome.best else "") + \
            ("" if fresh else "  (earlier run)")
        rows.append("  ".join([f"{k:5d}", *(str(v).rjust(w) for (_, v), w
                                             in zip(setting, widths)),
                               _rate(rate).rjust(13)]) + mark)
    if outcome.skipped:
        rows.append(f"skipped {len(outcome.skipped)} setting(s) the config validator refuses")
    if outcome.converged:
        rows.append(f"search converged: a full pass over {', '.join(TUNED_KEYS)} changed "
                    f"nothing")
    elif outcome.interrupted:
        rows.append("interrupted: the best so far; run the same command again to go on")
    else:
        rows.append("time budget spent: the best so far; run the same command again to go on")
    if outcome.best is None:
        rows.append("best: none (no trial succeeded)")
    else:
        k = next(k for k, (s, _, _) in enumerate(outcome.trials, 1) if s == outcome.best)
        rows.append(f"best: {outcome.best_rate:.0f} data points/s (trial {k})")
        rows.append(f"overrides: {' '.join(setting_overrides(outcome.best))}")
    return "\n".join(rows) + "\n"


def write_node_overrides(path: Path, outcome: SearchOutcome, command: str) -> None:
    """The best setting's node-level keys (simulators, batch sizes, thread pools: nothing of
    the layout) as an overrides file at ``path`` (a new file) that any preset takes
    (``--overrides FILE``)."""
    assert outcome.best is not None and outcome.best_rate is not None
    sections: dict[str, dict[str, int]] = {}
    for key, value in outcome.best:
        section, name = key.split(".")
        sections.setdefault(section, {})[name] = value
    header = (f"# {command}\n# best of {len(outcome.trials)} trials: "
              f"{outcome.best_rate:.0f} data points/s on {machine_description()}\n"
              f"# node settings only: dba3c train PRESET --overrides {path.name}\n")
    try:
        with open(path, "x", encoding="utf-8") as f:
            f.write(header + yaml.safe_dump(sections, sort_keys=False))
    except FileExistsError:
        raise UserError(f"--write {path} exists; give a new file") from None


def tune_command(config: str, overrides: list[str], *, seconds: float,
                 trial_seconds: float | None, write: str | None, state: str | None,
                 measure: Measure | None = None, num_cpus: int | None = None) -> int:
    """``dba3c tune``: search, keep the state file, print the report (and write the preset);
    exit code 0, 1 when no trial succeeded, or 130 after Ctrl-C."""
    if seconds <= 0:
        raise UserError(f"--seconds {seconds:g} must be a positive number of seconds")
    if trial_seconds is not None and trial_seconds <= 0:
        raise UserError(f"--trial-seconds {trial_seconds:g} must be a positive number of "
                        f"seconds")
    if write is not None and Path(write).exists():
        raise UserError(f"--write {write} exists; give a new file")
    if write is not None:
        check_output_file(write, f"--write {write}")
    cfg = load_config(config, overrides)
    num_cpus = num_cpus or len(bound_cpus())
    state_path = Path(state) if state else default_state_path(config)
    identity = state_identity(cfg, num_cpus)
    known = read_state(state_path, identity)

    def is_valid(setting: Setting) -> bool:
        try:
            apply_overrides(cfg, setting_overrides(setting))
        except UserError:
            return False
        return True

    values = make_candidates(cfg, num_cpus)
    start = start_values(cfg)
    trial_s = trial_seconds or default_trial_seconds(seconds, planned_trials(values, start))
    if not known and seconds < trial_s + STARTUP_S:
        raise UserError(f"--seconds {seconds:g} fits no trial ({trial_s:g} s of training and "
                        f"about {STARTUP_S:g} s of start-up): give at least "
                        f"{trial_s + STARTUP_S:g}")
    descent = CoordinateDescent(start, values, is_valid)
    saved = dict(known)
    print(f"tune: {config} on {num_cpus} cores, {seconds:g} s budget, {trial_s:g} s trials"
          f"{f', {len(known)} trials from {state_path}' if known else ''}", file=sys.stderr,
          flush=True)

    def on_trial(k: int, setting: Setting, rate: float | None, fresh: bool,
                 left: float) -> None:
        if fresh:
            saved[setting] = rate
            write_state(state_path, config, overrides, identity, saved, trial_s)
        print(f"tune: trial {k}: {' '.join(setting_overrides(setting))}: {_rate(rate)} data "
              f"points/s{'' if fresh else ' (earlier run)'}; best "
              f"{_rate(descent.best_rate())}; {left:.0f} s left", file=sys.stderr, flush=True)

    outcome = search(descent, measure or make_measure(config, overrides), budget_s=seconds,
                     trial_s=trial_s, clock=time.monotonic, known=known, on_trial=on_trial)
    print(report(outcome), end="")
    if outcome.interrupted:
        return 130
    if outcome.best is None:
        print("error: no trial succeeded (see the `tune: trial failed` lines above)",
              file=sys.stderr)
        return 1
    if write is not None:
        write_node_overrides(Path(write), outcome, " ".join(["dba3c tune", config, *overrides]))
        print(f"wrote {write}")
    return 0
