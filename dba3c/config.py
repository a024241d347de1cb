"""Configuration: frozen dataclasses, YAML presets, ``KEY=VALUE`` overrides, one validator.

A config is a tree of sections (``env``, ``model``, ``train``, ...). Every field carries its
constraint in its metadata, and :func:`validate` checks all fields and the cross-field rules in
one pass, so a user sees every mistake at once. Defaults are the paper's (Adamski et al. 2018).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib.util
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import yaml

from dba3c.errors import UserError

Check = Callable[[Any], "str | None"]


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, also reading exponent floats without a dot (``3e-4``, as in
    YAML 1.2) as numbers rather than strings."""


_Loader.yaml_implicit_resolvers = {first: list(resolvers) for first, resolvers
                                   in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver("tag:yaml.org,2002:float",
                              re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
                              list("-+0123456789"))


def load_yaml(stream: str | IO[str]) -> Any:
    """Parse YAML text or a file object safely (no object construction)."""
    return yaml.load(stream, Loader=_Loader)


class _Between:
    """A check that a number lies in [lo, hi] (or the open variants); ``finite`` says what a
    float key takes instead of NaN or infinity."""

    def __init__(self, lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False):
        self.lo, self.hi, self.lo_open, self.hi_open = lo, hi, lo_open, hi_open
        left, right = ("(" if lo_open else "["), (")" if hi_open else "]")
        self.text = f"a number in {left}{lo}, {hi}{right}"
        self.finite = (f"a finite number {'>' if lo_open else '>='} {lo:g}" if hi == INF else
                       f"a finite number in {left}{lo:g}, {hi:g}{right}")

    def __call__(self, x: float) -> str | None:
        too_low = x <= self.lo if self.lo_open else x < self.lo
        too_high = x >= self.hi if self.hi_open else x > self.hi
        return self.text if (too_low or too_high) else None


def _between(lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False) -> Check:
    """A check that a number lies in [lo, hi] (or the open variants)."""
    return _Between(lo, hi, lo_open=lo_open, hi_open=hi_open)


COLLECTIVE_ALGORITHMS = ("recursive", "mpi")  # dist.collective_algorithm's values
PRECISIONS = ("auto", "float32", "bfloat16")  # model.precision's values
WIRE_DTYPES = ("float32", "bfloat16")  # dist.wire_dtype's values
GATHER_AHEAD = ("auto", "always", "never")  # dist.gather_ahead's values


class _OneOf:
    """A check that a string is one of ``choices``; :attr:`allowed` says which (also what a
    value of another type is told: ``true`` read as a bool is not ``auto``)."""

    def __init__(self, *choices: str):
        self.choices, self.allowed = choices, "one of " + ", ".join(choices)

    def __call__(self, x: Any) -> str | None:
        return None if x in self.choices else self.allowed


def _one_of(*choices: str) -> Check:
    """A check that a string is one of ``choices``."""
    return _OneOf(*choices)


def _opt(default: Any, check: Check | None = None, doc: str = "") -> Any:
    return field(default=default, metadata={"check": check, "doc": doc})


# eval.protocol: what each protocol fixes, for training and evaluation alike (Machado et al.
# 2018, "Revisiting the Arcade Learning Environment", section 5: sticky actions 0.25, the
# full action set, no loss-of-life signal, no no-op starts). "paper" fixes nothing: the
# defaults are the paper's (30 no-op starts, no sticky actions).
PROTOCOLS: dict[str, dict[str, Any]] = {
    "paper": {},
    "machado": {"env.sticky_actions": 0.25, "env.full_action_space": True,
                "env.episodic_life": False, "env.noop_max": 0, "eval.noop_max": 0},
}

INF = float("inf")
POSITIVE = _between(1, INF)
NON_NEGATIVE = _between(0, INF)
UNIT = _between(0, 1)


@dataclass(frozen=True)
class EnvConfig:
    """Simulators: an ALE ROM name (``breakout``) or a gymnasium id (``CartPole-v1``)."""

    id: str = _opt("breakout", None, "ALE ROM name (breakout, pong, ...) or gymnasium id "
                   "(CartPole-v1)")
    num_envs: int = _opt(10, POSITIVE, "simulators per worker (paper: 10)")
    batch_size: int = _opt(0, NON_NEGATIVE, "envs per async recv batch, so emulation overlaps "
                           "prediction; 0 = num_envs // 2")
    num_threads: int = _opt(0, NON_NEGATIVE, "ALE emulator threads; 0 = number of cores")
    nice: int = _opt(0, _between(0, 19), "the ALE emulator threads run this many nice levels "
                     "below the trainer, so that where they share cores the trainer's step "
                     "goes first; 0 = the same priority. 10 made a trainer-bound process of "
                     "one rank 5-15% faster on 2 cores; where ranks share cores, another "
                     "rank's waits starve them")
    frame_skip: int = _opt(4, POSITIVE, "emulator frames per agent step")
    sticky_actions: float = _opt(0.0, UNIT, "repeat_action_probability")
    episodic_life: bool = _opt(False, None, "a lost life ends the training episode")
    noop_max: int = _opt(30, NON_NEGATIVE, "random no-ops at episode start")
    full_action_space: bool = _opt(False, None, "all 18 Atari actions, not the game's "
                                   "minimal set")
    max_episode_frames: int = _opt(108000, POSITIVE, "frame cap per training episode")


@dataclass(frozen=True)
class ModelConfig:
    """The network: ``ba3c`` (paper), ``a3c_ff`` (Mnih et al.) or ``mlp`` (vector inputs)."""

    kind: str = _opt("ba3c", _one_of("ba3c", "a3c_ff", "mlp"), "network: ba3c (paper), a3c_ff "
                     "(Mnih et al.) or mlp (vector observations)")
    hidden: int = _opt(128, POSITIVE, "units of the fully connected layer (paper: 128)")
    obs: str = _opt("grayscale", _one_of("grayscale", "rgb"), "Atari observation colour: "
                    "grayscale or rgb")
    frame_size: int = _opt(84, POSITIVE, "Atari frame side S in pixels: the 210x160 screen "
                           "resized to S x S by ale-py (paper: 84); at least 20 for a3c_ff, 52 "
                           "for ba3c")
    init: str = _opt("glorot", _one_of("glorot", "he"), "kernel initialisation: glorot (uniform) "
                     "or he (normal, variance 2/fan_in, on the ReLU layers: the paper's code's "
                     "default); the heads stay Glorot, the policy's scaled by 0.01")
    precision: str = _opt("float32", _one_of(*PRECISIONS), "the training ranks' forward and "
                          "backward passes: float32, or bfloat16 (mixed precision: parameters, "
                          "optimizer state, the loss, the heads and the gradients stay "
                          "float32; evaluation computes in float32), or auto: bfloat16 where "
                          "the CPU has native bfloat16 (AMX-BF16 or AVX512_BF16 in "
                          "/proc/cpuinfo), else float32")


@dataclass(frozen=True)
class TrainConfig:
    """The learner: n-step A3C loss, clipping, stopping conditions."""

    batch_size: int = _opt(32, POSITIVE, "data points per worker mini-batch")
    t_max: int = _opt(5, POSITIVE, "rollout length n of the n-step return")
    gamma: float = _opt(0.99, UNIT, "discount")
    entropy_beta: float = _opt(0.01, NON_NEGATIVE, "entropy bonus weight")
    value_weight: float = _opt(0.5, NON_NEGATIVE, "value loss weight")
    lr: float = _opt(1e-3, _between(0, 1, lo_open=True),
                     "learning rate of optim.kind (Adam or RMSProp)")
    lr_schedule: str = _opt("constant", _one_of("constant", "linear"), "constant, or linear: lr "
                            "x (1 - step / train.max_steps), applied on the shards from the "
                            "global step (needs train.max_steps)")
    grad_clip: float = _opt(0.1, NON_NEGATIVE, "clip threshold; 0 = off")
    grad_clip_mode: str = _opt("average_norm", _one_of("average_norm", "global_norm"),
                               "average_norm: per-tensor average norm (paper), or global_norm")
    reward_clip: float = _opt(1.0, NON_NEGATIVE, "clip rewards to [-c, c] for learning (scores "
                              "stay real); 0 = off")
    max_steps: int = _opt(100000, NON_NEGATIVE, "stop after this many global updates; 0 = no "
                          "limit")
    max_seconds: float = _opt(0.0, NON_NEGATIVE, "stop after this wall time; 0 = no limit")
    queue_size: int = _opt(2, POSITIVE, "mini-batches buffered between actor and trainer")
    max_nonfinite: int = _opt(20, POSITIVE, "consecutive non-finite updates (skipped) before the "
                              "run stops with an error")
    intra_op_threads: int = _opt(0, NON_NEGATIVE, "TensorFlow threads splitting one op; 0 = "
                                 "TensorFlow's choice (one per core); set when a process's first "
                                 "Learner starts TensorFlow")
    inter_op_threads: int = _opt(0, NON_NEGATIVE, "TensorFlow threads running independent "
                                 "ops; 0 = TensorFlow's choice")

    def reached_max_steps(self, step: int) -> bool:
        """Whether global step ``step`` is at or past ``max_steps`` (never when it is 0)."""
        return bool(self.max_steps) and step >= self.max_steps


@dataclass(frozen=True)
class AdamConfig:
    """Adam on the parameter servers (paper: beta1 0.8, beta2 0.75, epsilon 1e-8)."""

    beta1: float = _opt(0.8, _between(0, 1, hi_open=True), "first-moment decay")
    beta2: float = _opt(0.75, _between(0, 1, hi_open=True), "second-moment decay")
    epsilon: float = _opt(1e-8, _between(0, 1, lo_open=True), "denominator guard")


@dataclass(frozen=True)
class OptimConfig:
    """The parameter servers' update rule (paper: Adam; A3C and PAAC: RMSProp)."""

    kind: str = _opt("adam", _one_of("adam", "rmsprop"), "update rule: adam (paper) or rmsprop "
                     "(A3C, PAAC); its settings: adam.* or rmsprop.*, its rate: train.lr")


@dataclass(frozen=True)
class RMSPropConfig:
    """Non-centered RMSProp, epsilon inside the square root (A3C: alpha 0.99; PAAC: eps 0.1)."""

    alpha: float = _opt(0.99, _between(0, 1, hi_open=True), "mean-square decay")
    epsilon: float = _opt(0.1, _between(0, 1, lo_open=True), "added to the mean square under the "
                          "square root (non-centered RMSProp: g = alpha g + (1 - alpha) d^2, "
                          "theta -= lr d / sqrt(g + epsilon), as A3C/PAAC and Keras 3; "
                          "statistics shared on the shards)")


@dataclass(frozen=True)
class DistConfig:
    """The cluster layout and the gradient-aggregation protocol."""

    mode: str = _opt("sync", _one_of("sync", "async"), "sync (paper) or async (the paper's "
                     "unstable comparison)")
    aggregation: str = _opt("ps", _one_of("ps", "collective"), "ps: dedicated parameter-server "
                            "ranks (paper); collective: the training ranks hold the shards "
                            "(reduce-scatter, the optimizer, allgather; needs dist.ps=0, sync "
                            "mode, no backup workers, a training chief)")
    ps: int = _opt(1, NON_NEGATIVE, "parameter servers (model shards; at most the model's "
                   "parameter count); 0 with dist.aggregation=collective")
    workers: int = _opt(0, NON_NEGATIVE, "ranks computing gradients; 0 = from the world size")
    replicas_to_aggregate: int = _opt(0, NON_NEGATIVE, "gradients per step; 0 = all workers (W - "
                                      "k gives k backup workers)")
    emulate_workers: int = _opt(0, NON_NEGATIVE, "W: `dba3c train` alone trains with the "
                                "statistics of W sync workers: W groups of env.num_envs "
                                "simulators, a mini-batch from each, one update on the mean of "
                                "their W clipped gradients (the parameter server's); 0 = off. "
                                "Needs dist.mode=sync, a world of one rank")
    chief_trains: bool = _opt(True, None, "rank 0 computes gradients too")
    stall_timeout: float = _opt(300.0, NON_NEGATIVE, "seconds without a global step before the "
                                "chief ends the job naming the ranks it waits on; 0 = never "
                                "(distributed runs only)")
    poll_max_ms: float = _opt(0.5, _between(0, 1000, lo_open=True),
                              "longest sleep between two polls of a waiting worker or "
                              "parameter server, ms (dba3c bench scale: x its time scale)")
    collective_poll_us: float = _opt(50.0, _between(0, 1_000_000, lo_open=True),
                                     "longest sleep between two polls of a rank waiting in "
                                     "a collective, us (dist.aggregation=collective; "
                                     "dba3c bench scale: x its time scale)")
    collective_overlap: bool = _opt(True, None, "hide communication behind compute: the "
                                    "gradient leaves layer by layer during the backward pass "
                                    "and the next forward pass starts on the layers already "
                                    "gathered (dist.aggregation=collective; off with "
                                    "train.grad_clip_mode=global_norm)")
    replicate_first_bucket: bool = _opt(True, None, "with dist.collective_overlap: every "
                                        "rank holds the first layer's parameters and Adam "
                                        "state whole and sums its gradient with one "
                                        "allreduce (half the message rounds of the exchange "
                                        "a step cannot hide); false: cut like the others")
    gather_ahead: str = _opt("auto", _one_of(*GATHER_AHEAD), "with "
                             "dist.collective_overlap: the last layer's Adam step and "
                             "allgather start as soon as its reduce-scatter has completed, "
                             "during the rest of the backward pass (the same bits; a skipped "
                             "step drops it). always, never, or auto: each overlap probe "
                             "also times overlapped steps gathered ahead and the ranks keep "
                             "the fastest of the three (never without a probe)")
    overlap_probe_steps: int = _opt(10, NON_NEGATIVE, "with "
                                    "dist.collective_overlap: a probe makes N serial steps "
                                    "then N overlapped ones (and N gathered ahead, "
                                    "dist.gather_ahead=auto), times each mode over its last "
                                    "N - 1, and the ranks keep the fastest (0: no probe, "
                                    "overlapped from the first step)")
    overlap_probe_every: int = _opt(1000, NON_NEGATIVE, "with dist.overlap_probe_steps: a "
                                    "probe every N steps, the first at the run's start (0: "
                                    "that one only); at least 2 x dist.overlap_probe_steps "
                                    "(3 x with dist.gather_ahead=auto)")
    overlap_cost: float = _opt(0.14, NON_NEGATIVE, "what staging costs a synthetic rank's "
                               "overlapped step, as a fraction of its compute (dba3c bench "
                               "scale charges the cost bench/overlap_cost.json holds, which "
                               "dba3c bench overlap-cost measures on the machine at hand; "
                               "this default: 4 real ranks of 4 cores, docs/decisions.md, "
                               "\"staged step cost\")")
    collective_algorithm: str = _opt("recursive", _one_of(*COLLECTIVE_ALGORITHMS),
                                      "recursive: reduce-scatter by recursive halving and "
                                      "allgather by recursive doubling, log2 W rounds each "
                                      "(MPICH; set before MPI starts); mpi: the MPI library's "
                                      "own choice (MPICH: pairwise and ring, W - 1 rounds each, "
                                      "above 512 KB)")
    wire_dtype: str = _opt("float32", _one_of(*WIRE_DTYPES), "the type on the wire of the "
                           "gradients (both aggregations) and of the parameters' changes "
                           "(collective; a parameter server sends float32 parameters): "
                           "float32, or bfloat16, half the bytes: each worker's gradient "
                           "rounded to 8 significant bits, summed in float32 where gradients "
                           "meet (a parameter server; in a collective, each partial sum is "
                           "rounded again before it moves on); in a collective each shard's "
                           "Adam step is rounded to 8 significant bits and every copy, the "
                           "owner's too, takes that rounded step")

    @property
    def collective_poll_s(self) -> float:
        """``collective_poll_us`` in seconds: a waiting collective rank's longest sleep."""
        return self.collective_poll_us / 1e6


@dataclass(frozen=True)
class EvalConfig:
    """Greedy evaluation with frozen parameters (paper: every 1000 steps, 50 games)."""

    every: int = _opt(1000, NON_NEGATIVE, "global steps between evaluations; 0 = never")
    at_end: bool = _opt(True, None, "a run that ends (train.max_steps, train.max_seconds, the "
                        "target) at step eval.every or later evaluates its final parameters "
                        "and waits for it (a shorter run, such as a smoke test, ends at once "
                        "and says so); false: it ends at once, dropping an evaluation in "
                        "progress (a signal always drops it)")
    episodes: int = _opt(50, POSITIVE, "games per evaluation")
    target_score: float = _opt(300.0, None, "time-to-target threshold on the mean score")
    greedy: bool = _opt(True, None, "argmax actions (false: sample)")
    rank: bool = _opt(False, None, "a dedicated evaluator rank in distributed runs")
    stop_at_target: bool = _opt(False, None, "end the run when the target is reached")
    stop_below_target: bool = _opt(False, None, "end an evaluation once its mean cannot reach "
                                   "target_score (the games played plus the highest score for "
                                   "each game left fall short; games whose highest score is "
                                   "known: pong); eval.jsonl records the games played")
    probe_frames: int = _opt(800, NON_NEGATIVE, "frames of random play, fixed for the run, on "
                             "which each evaluation counts every layer's active units (ReLU "
                             "output positive on one of them; eval.jsonl active_units); 0 = "
                             "not counted")
    stop_if_dead: bool = _opt(True, None, "end the run when an evaluation finds a layer with no "
                              "active unit on the probe frames: the network's output no "
                              "longer depends on the observation, and no gradient reaches the "
                              "layers below it (false: say so and train on)")
    noop_max: int = _opt(30, NON_NEGATIVE, "random no-op starts")
    max_frames: int = _opt(18000, POSITIVE, "frame cap per evaluation episode")
    num_envs: int = _opt(8, POSITIVE, "parallel evaluation games")
    protocol: str = _opt("paper", _one_of(*PROTOCOLS), "paper: the keys as set (30 no-op starts, "
                         "no sticky actions); machado (Machado et al. 2018): sticky actions "
                         "0.25, the full action set, no loss-of-life signal, no no-op starts, "
                         "for training and evaluation alike (it sets the keys it names; another "
                         "value for one of them is an error; ALE games only)")


def _config_keys_error(text: str) -> str | None:
    """What ``run.allow_changes`` must be, when ``text`` names a key the schema lacks."""
    unknown = [k.strip() for k in text.split(",") if k.strip() and k.strip() not in all_keys()]
    if not unknown:
        return None
    return (f"config keys separated by commas, e.g. train.lr,run.seed; not a key: "
            f"{', '.join(unknown)}{_closest(unknown[0], all_keys())}")


@dataclass(frozen=True)
class RunConfig:
    """The run directory, seeding, checkpoints and logging."""

    dir: str = _opt("runs/default", None, "run directory (resumed if it has checkpoints)")
    seed: int = _opt(0, NON_NEGATIVE, "base random seed")
    checkpoint_every: int = _opt(1000, NON_NEGATIVE, "steps between checkpoints; 0 = end only")
    keep_checkpoints: int = _opt(3, POSITIVE, "checkpoints kept")
    log_every: int = _opt(10, POSITIVE, "steps between metrics lines")
    progress: str = _opt("auto", _one_of("auto", "bar", "lines", "none"), "live display: bar on "
                         "a terminal, periodic lines otherwise (auto, bar, lines, none)")
    wandb: bool = _opt(False, None, "also log the TensorBoard scalars to Weights & Biases "
                       "(pip install 'dba3c[wandb]')")
    wandb_project: str = _opt("dba3c", None, "the W&B project")
    wandb_mode: str = _opt("online", _one_of("online", "offline"),
                           "offline: files under RUN_DIR/wandb, for `wandb sync` later")
    allow_changes: str = _opt("", _config_keys_error, "keys, comma-separated "
                              "(train.lr,run.seed), whose change a resumed run accepts "
                              "though it changes what the run learns; each change is "
                              "appended to RUN_DIR/config_history.jsonl with its step. Time "
                              "limits, logging, checkpoint and evaluation cadence may change "
                              "without it (dba3c.training.rundir.OPERATIONAL_KEYS)")

    @property
    def allowed_changes(self) -> frozenset[str]:
        """The keys ``allow_changes`` names."""
        return frozenset(k.strip() for k in self.allow_changes.split(",") if k.strip())


@dataclass(frozen=True)
class DebugConfig:
    """Fault injection and deterministic data for tests; never needed for real runs."""

    synthetic_data: bool = _opt(False, None, "train on seeded random batches, no simulators")
    slow_rank: int = _opt(-1, None, "this rank sleeps slow_seconds before each gradient")
    slow_seconds: float = _opt(0.0, NON_NEGATIVE, "delay for slow_rank")
    nan_at_step: int = _opt(-1, None, "make the gradient of this step non-finite; -1 = off")
    nan_steps: int = _opt(1, POSITIVE, "how many consecutive steps get a non-finite gradient")
    fail_rank: int = _opt(-1, None, "this rank raises RuntimeError at fail_step")
    fail_step: int = _opt(-1, None, "step at which fail_rank raises")


@dataclass(frozen=True)
class SyntheticConfig:
    """Synthetic-compute ranks for scale tests: no TensorFlow, no simulators; each worker
    waits its compute time, then sends a seeded gradient of the real model's size."""

    enabled: bool = _opt(False, None, "synthetic-compute workers: no TensorFlow, no simulators; "
                         "each step waits, then sends a seeded gradient of the real model's size "
                         "through the real protocol (needs eval.every=0, eval.rank=false)")
    compute_ms: float = _opt(100.0, NON_NEGATIVE, "per-step compute time of a worker")
    jitter: float = _opt(0.0, NON_NEGATIVE, "per-step time x (1 + jitter x Exp(1)), seeded")
    slow_workers: int = _opt(0, NON_NEGATIVE, "the last K workers are stragglers (slow_factor x "
                             "the compute time)")
    slow_factor: float = _opt(2.0, _between(1, INF), "a straggler's compute-time multiple")


@dataclass(frozen=True)
class Config:
    """The whole resolved configuration."""

    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    adam: AdamConfig = field(default_factory=AdamConfig)
    rmsprop: RMSPropConfig = field(default_factory=RMSPropConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    run: RunConfig = field(default_factory=RunConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)

    def to_dict(self) -> dict:
        """The config as nested plain dicts (what ``config.yaml`` holds)."""
        return dataclasses.asdict(self)


SECTIONS: dict[str, type] = {
    "env": EnvConfig, "model": ModelConfig, "train": TrainConfig, "optim": OptimConfig,
    "adam": AdamConfig, "rmsprop": RMSPropConfig, "dist": DistConfig, "eval": EvalConfig,
    "run": RunConfig, "debug": DebugConfig, "synthetic": SyntheticConfig,
}


def all_keys() -> list[str]:
    """Every dotted key a config accepts, e.g. ``train.lr``."""
    return [f"{s}.{f.name}" for s, cls in SECTIONS.items() for f in dataclasses.fields(cls)]


def describe_keys() -> list[tuple[str, Any, str]]:
    """(dotted key, default, help) for every key, for documentation and ``--help``."""
    return [(f"{s}.{f.name}", f.default, f.metadata["doc"])
            for s, cls in SECTIONS.items() for f in dataclasses.fields(cls)]


def _markdown_value(value: Any) -> str:
    """A default as YAML would write it (``false``, ``inf``), backquoted where it is text."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value == INF:
        return "inf"
    if isinstance(value, str):
        return f"`{value}`" if value else '`""`'
    return str(value)


def keys_markdown() -> str:
    """The config key reference: one Markdown table row per key (its default and the
    schema's own description), as docs/config.md shows it and ``dba3c keys`` prints it."""
    rows = ["| key | default | meaning |", "|---|---|---|"]
    rows += [f"| `{key}` | {_markdown_value(default)} | {doc} |"
             for key, default, doc in describe_keys()]
    return "\n".join(rows) + "\n"


def _closest(name: str, options: list[str]) -> str:
    match = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    return f" (did you mean '{match[0]}'?)" if match else ""


def _type_error(key: str, value: Any, ftype: str) -> str | None:
    """The message for ``value`` not being of the field type ``ftype`` (None if it is)."""
    ok = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
    }[ftype]
    if ok:
        return None
    kind = {"int": "an integer", "float": "a number", "bool": "true or false",
            "str": "a string"}[ftype]
    return f"{key}={value!r} must be {kind}"


def _non_finite_error(key: str, value: float, metadata: Any) -> str:
    """The message for NaN or infinity given to a float key: what the key takes instead,
    with the meaning of 0 where its description gives one (e.g. ``0 = no limit``)."""
    check = metadata["check"]
    allowed = check.finite if isinstance(check, _Between) else "a finite number"
    zero = re.search(r"\b0 = ([^;,()]+)", metadata["doc"])
    return f"{key}={value!r} must be {allowed}" + (f" (0 = {zero[1].strip()})" if zero else "")


@functools.lru_cache(maxsize=1)
def ale_games() -> tuple[str, ...]:
    """The ROM names shipped inside ale-py: the keys of its ``roms/md5.json`` (what
    ``ale_py.roms.get_all_rom_ids`` reads), found without importing ale_py, which imports
    gymnasium (0.2-0.4 s in each of a run's ranks)."""
    import importlib.util
    import json
    from pathlib import Path

    spec = importlib.util.find_spec("ale_py")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("ale-py is not installed: `pip install ale-py` for Atari games")
    md5 = Path(spec.submodule_search_locations[0]) / "roms" / "md5.json"
    return tuple(sorted(name.split(".")[0] for name in json.loads(md5.read_text())))


def is_atari(env_id: str) -> bool:
    """True when ``env_id`` names an ALE ROM (snake_case, no version suffix)."""
    return "-v" not in env_id and "/" not in env_id


def gym_atari_rom(env_id: str) -> str | None:
    """The ALE ROM name of a gymnasium Atari id (``ALE/Breakout-v5``, ``BreakoutNoFrameskip-v4``
    -> ``breakout``); None when ``env_id`` is not one."""
    match = re.fullmatch(r"(ALE/)?([A-Za-z0-9]+?)(NoFrameskip|Deterministic)?-v\d+", env_id)
    if match is None:
        return None
    rom = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", match[2]).lower()
    return rom if rom in ale_games() else None


def _env_id_error(env_id: str) -> str | None:
    if is_atari(env_id):
        if env_id in ale_games():
            return None
        close = difflib.get_close_matches(env_id, ale_games(), n=3, cutoff=0.6)
        hint = (f"close ROM names: {', '.join(close)}" if close else
                f"the ROM names: {', '.join(ale_games())}")
        return f"env.id={env_id!r} is not an ALE ROM ({hint})"
    rom = gym_atari_rom(env_id)
    if rom is not None or env_id.startswith("ALE/"):
        return (f"env.id={env_id!r} is a gymnasium Atari id; Atari games are given by their "
                f"ALE ROM name" + (f": env.id={rom}" if rom else " (e.g. env.id=breakout)"))
    import gymnasium

    if env_id in gymnasium.registry:
        return None
    close = difflib.get_close_matches(env_id, list(gymnasium.registry), n=3, cutoff=0.6)
    hint = f"close ids: {', '.join(close)}" if close else "an ALE ROM name or a gymnasium id"
    return f"env.id={env_id!r} is not a known environment ({hint})"


def num_shards_error(num_ps: int, num_params: int) -> str | None:
    """The message for ``num_params`` parameters not splitting into ``num_ps`` non-empty
    shards (None when they do)."""
    if num_ps <= num_params:
        return None
    return (f"dist.ps={num_ps} must be <= the model's {num_params} parameters "
            f"(every parameter server needs a non-empty shard)")


def _cross_field_errors(cfg: Config, env_known: bool = True) -> list[str]:
    """Rules that involve more than one key (those that need the network, the simulator or
    the score tables are :func:`dba3c.preset.world_errors`); those of the env's kind only
    when ``env_known`` (an unknown env.id has its own message)."""
    errors = []
    if cfg.env.batch_size > cfg.env.num_envs:
        errors.append(f"env.batch_size={cfg.env.batch_size} must be <= env.num_envs="
                      f"{cfg.env.num_envs}")
    atari = is_atari(cfg.env.id)
    if env_known and atari and cfg.model.kind == "mlp":
        errors.append(f"model.kind='mlp' needs a vector-observation env, not the Atari game "
                      f"env.id={cfg.env.id!r} (use ba3c or a3c_ff)")
    elif env_known and not atari and cfg.model.kind != "mlp":
        errors.append(f"model.kind={cfg.model.kind!r} needs an Atari env; env.id="
                      f"{cfg.env.id!r} has vector observations (use mlp)")
    if not atari and env_known:
        errors += [f"{key}={value!r} applies to ALE games only, not env.id={cfg.env.id!r}"
                   for key, value in (("eval.protocol", cfg.eval.protocol),
                                      ("env.full_action_space", cfg.env.full_action_space))
                   if value not in ("paper", False)]
    workers = cfg.dist.workers
    if workers and cfg.dist.replicas_to_aggregate > workers:
        errors.append(f"dist.replicas_to_aggregate={cfg.dist.replicas_to_aggregate} must be "
                      f"<= dist.workers={workers}")
    if cfg.dist.mode == "async" and cfg.dist.replicas_to_aggregate not in (0, 1):
        errors.append(f"dist.replicas_to_aggregate={cfg.dist.replicas_to_aggregate} has no "
                      f"meaning in dist.mode=async (use 0)")
    errors += _aggregation_errors(cfg) + _probe_errors(cfg.dist)
    if cfg.dist.emulate_workers:
        errors += _emulation_errors(cfg)
    if cfg.synthetic.enabled:
        errors += _synthetic_errors(cfg)
    if cfg.run.wandb and importlib.util.find_spec("wandb") is None:
        errors.append("run.wandb=true needs the wandb package, which is not installed "
                      "(pip install 'dba3c[wandb]', or set run.wandb=false)")
    if cfg.train.lr_schedule == "linear" and cfg.train.max_steps == 0:
        errors.append("train.lr_schedule='linear' decays to 0 at train.max_steps, and "
                      "train.max_steps=0 (set train.max_steps, or train.lr_schedule=constant)")
    if cfg.train.max_steps == 0 and cfg.train.max_seconds == 0:
        errors.append("train.max_steps=0 and train.max_seconds=0: the run would never end "
                      "(set at least one)")
    return errors


def _aggregation_errors(cfg: Config) -> list[str]:
    """What each ``dist.aggregation`` cannot do: collective aggregation has no parameter-server
    ranks, no backup workers, no asynchronous mode and a training chief."""
    dist = cfg.dist
    if dist.aggregation == "ps":
        return [] if dist.ps else ["dist.ps=0 must be at least 1 with dist.aggregation=ps "
                                   "(dist.ps=0 goes with dist.aggregation=collective)"]
    needs_ps = "needs dist.aggregation: ps"
    errors = []
    if dist.ps:
        errors.append(f"dist.ps={dist.ps} has no meaning with dist.aggregation=collective (the "
                      f"training ranks hold the shards): set dist.ps=0, or use "
                      f"dist.aggregation: ps")
    if dist.mode == "async":
        errors.append(f"dist.mode=async {needs_ps} (collective steps are synchronous)")
    if dist.replicas_to_aggregate and dist.replicas_to_aggregate != dist.workers:
        errors.append(f"dist.replicas_to_aggregate={dist.replicas_to_aggregate} (backup "
                      f"workers) {needs_ps} (collective aggregation averages every rank's "
                      f"gradient: use 0)")
    if not dist.chief_trains:
        errors.append(f"dist.chief_trains=false {needs_ps} (with collective aggregation the "
                      f"chief is a training rank)")
    return errors


def probe_modes(dist: DistConfig) -> tuple[str, ...]:
    """The modes an overlap probe times, in its order: serial and overlapped steps, and
    overlapped steps gathered ahead with ``dist.gather_ahead=auto``."""
    return ("serial", "overlapped", "ahead") if dist.gather_ahead == "auto" else \
        ("serial", "overlapped")


def _probe_errors(dist: DistConfig) -> list[str]:
    """A probe times each mode over all its steps but the first, so it needs two of each,
    and a probe must end before the next one starts."""
    probe, every, modes = dist.overlap_probe_steps, dist.overlap_probe_every, probe_modes(dist)
    if probe == 1:
        return ["dist.overlap_probe_steps=1 times nothing (a mode's first step is not timed): "
                "use 0 (no probe) or at least 2"]
    if probe and every and every < len(modes) * probe:
        return [f"dist.overlap_probe_every={every} must be 0 or at least {len(modes)} x "
                f"dist.overlap_probe_steps={probe} (a probe's {len(modes) * probe} steps: "
                f"{', '.join(modes)})"]
    return []


def _emulation_errors(cfg: Config) -> list[str]:
    """What one process emulating W synchronous workers (``dist.emulate_workers``) cannot do:
    asynchronous updates, backup workers, synthetic-compute ranks."""
    dist, key = cfg.dist, f"dist.emulate_workers={cfg.dist.emulate_workers}"
    errors = []
    if dist.mode == "async":
        errors.append(f"{key} emulates synchronous workers: it needs dist.mode=sync")
    if dist.replicas_to_aggregate not in (0, dist.emulate_workers):
        errors.append(f"dist.replicas_to_aggregate={dist.replicas_to_aggregate} (backup "
                      f"workers) has no meaning with {key}: every emulated worker's gradient "
                      f"arrives (use 0)")
    if cfg.synthetic.enabled:
        errors.append(f"{key} computes real gradients in one process and "
                      f"synthetic.enabled=true runs synthetic ranks under mpiexec (set one "
                      f"of them off)")
    if dist.wire_dtype != DistConfig.wire_dtype:
        errors.append(f"dist.wire_dtype={dist.wire_dtype} has no meaning with {key}: its "
                      f"gradients are averaged in the process, never on a wire (use "
                      f"{DistConfig.wire_dtype})")
    return errors


def _synthetic_errors(cfg: Config) -> list[str]:
    """What synthetic-compute ranks cannot do: evaluate (that needs TensorFlow)."""
    errors = []
    if cfg.eval.every:
        errors.append(f"eval.every={cfg.eval.every} needs a network, and synthetic.enabled=true "
                      f"runs none (set eval.every=0)")
    if cfg.eval.rank:
        errors.append("eval.rank=true: synthetic.enabled=true runs no evaluator rank "
                      "(set eval.rank=false)")
    workers = cfg.dist.workers
    if workers and cfg.synthetic.slow_workers > workers:
        errors.append(f"synthetic.slow_workers={cfg.synthetic.slow_workers} must be <= "
                      f"dist.workers={workers}")
    return errors


WorldCheck = Callable[["Config"], list[str]]
"""The rules that need facts from outside this module (:func:`dba3c.preset.world_errors`):
run once every field has a valid type and range and the env id is known; their problems are
reported with the cross-field ones."""


def validate(cfg: Config, world: WorldCheck | None = None) -> Config:
    """Check every field and cross-field rule (and ``world``'s); raise one UserError listing
    all problems."""
    errors = validation_errors(cfg, world)
    if errors:
        raise UserError("; ".join(errors))
    return cfg


def validation_errors(cfg: Config, world: WorldCheck | None = None) -> list[str]:
    """Every problem with the values of ``cfg``: types, ranges, env id, cross-field rules,
    then ``world``'s rules."""
    errors = []
    for section, cls in SECTIONS.items():
        values = getattr(cfg, section)
        for f in dataclasses.fields(cls):
            key, value = f"{section}.{f.name}", getattr(values, f.name)
            problem = _type_error(key, value, str(f.type))  # a string: postponed annotations
            if problem and isinstance(f.metadata["check"], _OneOf):
                problem = f"{key}={value!r} must be {f.metadata['check'].allowed}"
            if problem is None and isinstance(value, float) and not math.isfinite(value):
                problem = _non_finite_error(key, value, f.metadata)
            if problem is None and f.metadata["check"] is not None:
                allowed = f.metadata["check"](value)
                problem = f"{key}={value!r} must be {allowed}" if allowed else None
            if problem:
                errors.append(problem)
    if not errors:
        env_problem = _env_id_error(cfg.env.id)
        errors += [env_problem] if env_problem else []
        errors += _cross_field_errors(cfg, env_known=env_problem is None)
        if env_problem is None and world is not None:
            errors += world(cfg)
    return errors


def _unknown_section_error(section: Any, source: str) -> str:
    return (f"unknown section {section!r} in {source}{_closest(str(section), list(SECTIONS))}; "
            f"allowed: {', '.join(SECTIONS)}")


def _unknown_key_errors(section: str, keys: Iterable[Any],
                        source: Callable[[str], str]) -> list[str]:
    """The messages for the ``keys`` that section ``section`` lacks; ``source(dotted key)``:
    where the key was given."""
    names = [f.name for f in dataclasses.fields(SECTIONS[section])]
    full = ", ".join(f"{section}.{n}" for n in names)
    return [f"unknown key '{section}.{key}' in {source(f'{section}.{key}')}"
            f"{_closest(f'{section}.{key}', all_keys())}; allowed in {section}: {full}"
            for key in keys if key not in names]


def from_dict(tree: dict, source: str = "config", world: WorldCheck | None = None,
              origins: Mapping[str, str] | None = None) -> Config:
    """Build and validate a Config from nested dicts; unknown keys suggest the closest.
    ``origins``: where a section or dotted key came from when not from ``source`` (e.g. an
    override), for the messages about unknown ones."""
    if not isinstance(tree, dict):
        raise UserError(f"{source} must be a mapping of sections "
                        f"({', '.join(SECTIONS)}), got {type(tree).__name__}")
    origins = origins or {}

    def where(name: str) -> str:
        return origins.get(name, source)

    errors, sections = [], {}
    for section, values in tree.items():
        if section not in SECTIONS:
            errors.append(_unknown_section_error(section, where(str(section))))
            continue
        if values is None:
            values = {}
        if not isinstance(values, dict):
            errors.append(f"section {section!r} in {source} must be a mapping of keys")
            continue
        errors += _unknown_key_errors(section, values, where)
        names = {f.name for f in dataclasses.fields(SECTIONS[section])}
        sections[section] = SECTIONS[section](**{k: v for k, v in values.items()
                                                 if k in names})
    errors += _apply_protocol(sections)
    cfg = Config(**sections)
    errors += validation_errors(cfg, world)
    if errors:
        raise UserError("; ".join(errors))
    return cfg


def _apply_protocol(sections: dict[str, Any]) -> list[str]:
    """Set the keys ``eval.protocol`` fixes in ``sections`` (section name -> dataclass,
    replaced in place); the messages for keys set to something else."""
    protocol = sections["eval"].protocol if "eval" in sections else "paper"
    errors = []
    for key, value in PROTOCOLS.get(protocol, {}).items():
        section, name = key.split(".")
        values = sections.get(section, SECTIONS[section]())
        default = getattr(SECTIONS[section](), name)
        if getattr(values, name) not in (value, default):
            errors.append(f"eval.protocol={protocol} sets {key}={value!r}; {key}="
                          f"{getattr(values, name)!r} contradicts it (leave {key} out, or "
                          f"use eval.protocol=paper)")
        sections[section] = dataclasses.replace(values, **{name: value})
    return errors


def override_origins(overrides: Sequence[str]) -> dict[str, str]:
    """Where each override's dotted key and section came from (``the override KEY=VALUE``),
    for :func:`from_dict`'s messages; the last override of a key wins, as its value does."""
    origins = {}
    for item in overrides:
        key = item.partition("=")[0]
        origins[key] = origins[key.split(".", 1)[0]] = f"the override {item}"
    return origins


def parse_overrides(overrides: list[str]) -> dict:
    """``["train.lr=3e-4", "env.id=pong"]`` -> nested dict, values typed as YAML."""
    tree: dict = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or "." not in key:
            raise UserError(f"override {item!r} must look like section.key=value "
                            f"(e.g. train.lr=0.0003)")
        section, name = key.split(".", 1)
        try:
            value = load_yaml(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        tree.setdefault(section, {})[name] = value
    return tree


def overrides_file(path: str) -> list[str]:
    """A YAML file of config sections (``env: {num_envs: 16}``) as ``KEY=VALUE`` overrides,
    in the file's order: what ``--overrides FILE`` adds before the command line's own (values
    written as JSON, which YAML reads back as the same value)."""
    tree = read_yaml(path)
    if not isinstance(tree, dict):
        raise UserError(f"overrides file {path!r} must be a mapping of sections "
                        f"({', '.join(SECTIONS)}), got {type(tree).__name__}")
    source = f"the overrides file {path}"
    items, errors = [], []
    for section, values in tree.items():
        if section not in SECTIONS:
            errors.append(_unknown_section_error(section, source))
            continue
        if not isinstance(values, dict):
            raise UserError(f"section {section!r} in the overrides file {path} must be a "
                            f"mapping of keys")
        errors += _unknown_key_errors(section, values, lambda _: source)
        items += [f"{section}.{key}={json.dumps(value)}" for key, value in values.items()]
    if errors:  # here, where the file is named: as KEY=VALUE items they would not be
        raise UserError("; ".join(errors))
    return items


def overrides_files(paths: Sequence[str]) -> list[str]:
    """Every file's :func:`overrides_file` items, the files in order."""
    return [item for path in paths for item in overrides_file(path)]


def _merge(base: dict, extra: dict) -> dict:
    merged = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for section, values in extra.items():
        if isinstance(merged.get(section), dict) and isinstance(values, dict):
            merged[section].update(values)
        else:
            merged[section] = values
    return merged


def read_yaml(path: str) -> dict:
    """Read a YAML mapping; missing or malformed files become one-line UserErrors."""
    if not os.path.exists(path):
        raise UserError(f"config file {path!r} not found (presets live in configs/)")
    if os.path.isdir(path):
        raise UserError(f"config {path!r} is a directory, expected a YAML file")
    try:
        with open(path, encoding="utf-8") as f:
            tree = load_yaml(f)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or "not valid YAML"
        raise UserError(f"malformed YAML in {path}{where}: {problem}") from None
    except (UnicodeDecodeError, OSError) as e:
        raise UserError(f"cannot read config {path!r}: {e}") from None
    return {} if tree is None else tree


def load_config(path: str, overrides: Sequence[str] = (),
                world: WorldCheck | None = None) -> Config:
    """Load a YAML preset, apply ``KEY=VALUE`` overrides, validate everything at once."""
    tree = read_yaml(path)
    if not isinstance(tree, dict):
        raise UserError(f"config {path!r} must be a mapping of sections "
                        f"({', '.join(SECTIONS)}), got {type(tree).__name__}")
    return from_dict(_merge(tree, parse_overrides(list(overrides))), path, world,
                     override_origins(overrides))


def apply_overrides(cfg: Config, overrides: list[str], source: str = "config",
                    world: WorldCheck | None = None) -> Config:
    """``cfg`` with ``KEY=VALUE`` overrides applied, validated again."""
    return from_dict(_merge(cfg.to_dict(), parse_overrides(list(overrides))), source, world,
                     override_origins(overrides))


def dump_yaml(cfg: Config) -> str:
    """The resolved config as YAML text."""
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)
