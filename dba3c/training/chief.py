"""The chief's duties, whatever the transport: the run directory, metrics, checkpoints,
evaluation results and the decision to stop.

The chief learns of each new global step through :meth:`Chief.on_step`, of workers' counters
through :meth:`worker_report`, of parameter/Adam state through :meth:`save_checkpoint`, and of
evaluations through :meth:`on_eval`. It never talks to other ranks itself.

A run ends normally (``train.max_steps``, ``train.max_seconds``, the target score) or by a
signal. At a normal end the final parameters are evaluated (``eval.at_end``) and the run
waits for that evaluation; a signal drops the evaluation in progress, saying so.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING

import numpy as np

from dba3c.config import INF, Config
from dba3c.core import Evaluation, Params
from dba3c.games.scores import score_stats
from dba3c.learning.models import NetSpec
from dba3c.learning.optim import learning_rate
from dba3c.learning.params import ParamLayout
from dba3c.training import checkpoint
from dba3c.training.checkpoint import Shards
from dba3c.training.metrics import Progress, ScalarLog, TensorBoard, Wandb
from dba3c.training.report import AVERAGED, FRACTIONS, WorkerReport
from dba3c.training.rundir import ConfigChange, DiskFull, JsonlWriter, RunDir

if TYPE_CHECKING:  # TensorFlow: a synthetic-compute chief evaluates nothing and imports none
    from dba3c.games.evaluation import BackgroundEvaluator

PROGRESS_EVERY_S = 10.0  # between lines while the run waits for its last evaluation


class Chief:
    """Owns the run directory of one training run; ``with Chief(...) as chief`` closes it
    (:meth:`close`) however the block ends.

    Args:
      cfg: the resolved config. start: the checkpoint resumed from (None for a fresh run).
      layout: the parameter layout (stored in checkpoints). num_workers: gradient ranks.
      hosts: the host of every rank, by rank (recorded in the summary as ``hosts``; a
        resumed run records the hosts of its latest segment).
      changes: what the config changes in the one that trained ``start``
        (:attr:`~dba3c.training.checkpoint.StartState.changes`, accepted), recorded in the
        run directory's config history.
    """

    def __init__(self, cfg: Config, start: checkpoint.Checkpoint | None, layout: ParamLayout,
                 num_workers: int, hosts: Sequence[str],
                 changes: Sequence[ConfigChange] = ()):
        self.cfg, self.layout, self.num_workers = cfg, layout, num_workers
        self.run_dir = RunDir(cfg.run.dir)
        self.start_step = start.step if start else 0
        self.run_dir.create(cfg, self.start_step, changes)
        self.time_offset = start.meta.get("time_s", 0.0) if start else 0.0
        # summary.json when it is the record at the resumed step (newer evaluations)
        self.summary = (self.run_dir.resumed_summary(start.step, start.meta.get("summary", {}))
                        if start else {})
        self.run_dir.truncate_logs(self.start_step)
        self.metrics = JsonlWriter(self.run_dir.metrics_path)
        self.evals = JsonlWriter(self.run_dir.evals_path)
        if not cfg.synthetic.enabled:  # a synthetic chief imports no TensorFlow
            from dba3c.cpus import bound_cpus
            from dba3c.learning.learner import set_tensorflow_threads

            # the TensorBoard writer starts TensorFlow, which fixes its thread pools then:
            # size them first, for the learner that this process may make later
            set_tensorflow_threads(cfg.train, len(bound_cpus()))
        self.scalar_logs: list[ScalarLog] = [TensorBoard(self.run_dir.tensorboard_dir,
                                                         use_tensorflow=not cfg.synthetic.enabled)]
        if cfg.run.wandb:
            self.scalar_logs.append(Wandb(cfg, self.run_dir.path))
        self.progress = Progress(cfg.run.progress, cfg.train.max_steps, self.start_step)
        self.t0 = time.monotonic()
        self.step = self.logged_step = self.start_step
        self.reports: dict[int, WorkerReport] = {}
        self.extra: dict = {}  # e.g. dist/* counters from parameter servers
        # (t, data points, frames, times)
        self._window: tuple[float, float, float, dict] = (time.monotonic(), 0.0, 0.0, {})
        self.stop_reason: str | None = None
        self.signal: str | None = None  # the name of the signal that stopped the run
        self._said_dead = False  # the line about a dead layer was said (once a run)
        self._progress_shown = -INF  # when the last line about the last evaluation was
        # when the evaluation the run waits for began to be waited for, and its frames so far
        self._waiting_since: float | None = None
        self._waiting_frames = 0
        self._stop_at_max_steps(self.start_step)  # a finished run started again: nothing to do
        if self.stop_reason:
            print(f"{self.run_dir.path} is at step {self.start_step}: train.max_steps="
                  f"{cfg.train.max_steps} reached, nothing to train (raise train.max_steps or "
                  f"use a new run.dir)", file=sys.stderr, flush=True)
        self.summary.setdefault("target_score", cfg.eval.target_score)
        self.summary.setdefault("time_to_target_s", None)
        self.summary["eval_protocol"] = cfg.eval.protocol
        self.summary["hosts"] = list(hosts)

    # ---- inputs -------------------------------------------------------------------------
    def elapsed(self) -> float:
        """Wall seconds of training, including earlier segments of a resumed run."""
        return self.time_offset + time.monotonic() - self.t0

    def worker_report(self, rank: int, report: WorkerReport) -> None:
        """The newest cumulative counters and losses of one worker."""
        self.reports[rank] = report

    def install_signal_handlers(self) -> None:
        """SIGTERM, SIGINT and SIGUSR2 ask for a checkpoint and a clean stop (and drop the
        evaluation in progress, also the one a normal end waits for)."""
        def handler(signum: int, _frame: FrameType | None) -> None:
            self.signal = self.signal or signal.Signals(signum).name
            self.request_stop(f"signal {self.signal}")

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2):
            signal.signal(sig, handler)

    def request_stop(self, reason: str) -> None:
        """Stop at the next step boundary (first reason wins)."""
        self.stop_reason = self.stop_reason or reason

    def on_step(self, step: int) -> None:
        """A new global step exists: log it, check the time limit."""
        self.step = step
        max_s = self.cfg.train.max_seconds
        if max_s and self.elapsed() >= max_s:
            self.request_stop(f"train.max_seconds={max_s:g} reached")
        self._stop_at_max_steps(step)
        if step % self.cfg.run.log_every == 0 or self.stop_reason:
            self._log(step)

    def _stop_at_max_steps(self, step: int) -> None:
        if self.cfg.train.reached_max_steps(step):
            self.request_stop(f"train.max_steps={self.cfg.train.max_steps} reached")

    def checkpoint_due(self, step: int) -> bool:
        """Whether the state at ``step`` should be written."""
        return checkpoint.checkpoint_due(self.cfg.run.checkpoint_every, step, self.start_step)

    def save_checkpoint(self, step: int, theta: Shards, adam_m: Shards, adam_v: Shards,
                        adam_count: int) -> Path:
        """Write the full state at ``step`` atomically; each vector as its shards in order
        (written without joining them)."""
        meta = {"config": self.cfg.to_dict(), "layout": self.layout.to_dict(),
                "time_s": self.elapsed(), "seed": self.cfg.run.seed,
                "summary": self.summary, "num_workers": self.num_workers}
        return checkpoint.save_state(self.run_dir.checkpoints_dir, step, (theta, adam_m, adam_v),
                                     adam_count, meta, self.cfg.run.keep_checkpoints)

    def on_eval(self, evaluation: Evaluation) -> None:
        """An evaluation finished: record its scores and active units (eval.jsonl, the
        scalars, the summary); the target reached or a dead layer may end the run."""
        step = evaluation.step
        record = {"step": step, "time_s": self.elapsed(),
                  **score_stats(self.cfg.env.id, list(evaluation.scores))}
        active = dict(zip(self.layout.layers, evaluation.active_units))
        if active:
            record["active_units"] = active
        self.evals.write(record)
        eval_scalars = {f"eval/{k}_score": record[k] for k in ("mean", "max")}
        eval_scalars.update({f"eval/active_units/{layer}": n for layer, n in active.items()})
        self._check_alive(step, active)
        if "hns" in record:
            eval_scalars["eval/hns"] = record["hns"]
            self.summary["hns"] = record["hns"]  # of the latest evaluation
            self.summary["best_hns"] = max(record["hns"], self.summary.get("best_hns", -INF))
        if record["mean"] >= self.cfg.eval.target_score and \
                self.summary["time_to_target_s"] is None:
            self.summary.update(time_to_target_s=record["time_s"], target_step=step)
            if self.cfg.eval.stop_at_target:
                self.request_stop(f"eval.target_score={self.cfg.eval.target_score:g} reached")
        self.summary["last_eval"] = {"step": step, "mean": record["mean"],
                                     "episodes": record["episodes"],
                                     "greedy": self.cfg.eval.greedy,
                                     **({"hns": record["hns"]} if "hns" in record else {})}
        if self.stop_reason is not None:  # what the run ended with
            self._say(f"evaluation of step {step}: mean score {record['mean']:g} over "
                      f"{record['episodes']} games"
                      + (f", hns {record['hns']:.3f}" if "hns" in record else ""))
        self._write_scalars(step, eval_scalars)
        self._write_summary()

    def _check_alive(self, step: int, active: dict[str, int]) -> None:
        """A layer with no active unit on the probe frames makes the network's output a
        constant: say so (at the first evaluation that finds one; eval.jsonl records every
        one), and with ``eval.stop_if_dead`` end the run."""
        dead = [layer for layer, n in active.items() if n == 0]
        if not dead or self._said_dead:
            return
        self._said_dead = True
        stopping = self.cfg.eval.stop_if_dead
        self._say(f"step {step}: the network is dead: layer {dead[0]} has no active unit on "
                  f"{self.cfg.eval.probe_frames} frames of random play (eval.probe_frames), so "
                  f"its output no longer depends on the observation and no gradient reaches "
                  f"the layers below it; "
                  + ("the run stops (eval.stop_if_dead=false trains on)" if stopping
                     else "training goes on (eval.stop_if_dead=false)"))
        if stopping:
            self.request_stop(f"eval.stop_if_dead: layer {dead[0]} dead at step {step}")

    # ---- evaluation in this process, and at the end ---------------------------------------
    @contextmanager
    def evaluator_thread(self, spec: NetSpec,
                         wanted: bool = True) -> Iterator[BackgroundEvaluator | None]:
        """This process's evaluator thread while the block runs (None unless ``eval.every``
        asks for evaluations and ``wanted``: no evaluator rank does them), stopped at its
        end whatever happens."""
        if not (self.cfg.eval.every and wanted):
            yield None
            return
        from dba3c.games.evaluation import BackgroundEvaluator  # TensorFlow: only here

        evaluator = BackgroundEvaluator(self.cfg, spec, self.start_step)
        evaluator.start()
        try:
            yield evaluator
        finally:
            evaluator.stop()

    def finish_evaluations(self, evaluator: BackgroundEvaluator | None,
                           final: Params | None) -> None:
        """The end of the run for this process's evaluator (if any): at a normal end (no
        signal, ``eval.at_end``) it evaluates the ``final`` parameters (unless it did, or
        the run was too short: :func:`evaluates_at_end`) and the run waits for every
        evaluation it was given, with a line every 10 s; a signal meanwhile drops the one in
        progress, as does the end of a run without ``eval.at_end``. Records what finished;
        says what was dropped."""
        if evaluator is None:
            return
        if self.cfg.eval.at_end and self.signal is None and final is not None:
            evaluator.schedule.last(final.version, final.theta)
            while evaluator.in_progress() is not None and self.signal is None:
                for evaluation in evaluator.results():
                    self.on_eval(evaluation)
                self.evaluation_progress(evaluator.games, evaluator.frames)
                time.sleep(0.05)
        evaluator.stop()
        dropped = evaluator.in_progress()
        for evaluation in evaluator.results():
            self.on_eval(evaluation)
        if dropped is not None:
            self.evaluation_dropped(dropped)

    def evaluation_progress(self, games: int, frames: int) -> None:
        """The run is over and waits for an evaluation that has played ``games`` games and
        ``frames`` emulator frames: a line now and then, with the most time it can take
        (every game left running to the ``eval.max_frames`` cap)."""
        now = time.monotonic()
        if self._waiting_since is None or frames < self._waiting_frames:  # a new evaluation
            self._waiting_since = now
        self._waiting_frames = frames
        if now - self._progress_shown < PROGRESS_EVERY_S:
            return
        self._progress_shown = now
        episodes, cap = self.cfg.eval.episodes, self.cfg.eval.max_frames
        waited = now - self._waiting_since
        line = (f"waiting for the evaluation at the end of the run: {games} of {episodes} "
                f"games over, {frames:,} frames played (at most {episodes * cap:,}: "
                f"eval.max_frames={cap:,} a game), {waited:.0f} s")
        if frames and waited > 0:
            line += f", at most {(episodes * cap - frames) * waited / frames:.0f} s left"
        self._say(line)

    def _say_if_not_evaluated_at_end(self) -> None:
        """A run that ended normally without evaluating its final parameters because it
        was too short (:func:`evaluates_at_end`) says so, and how to ask for one."""
        every = self.cfg.eval.every
        if (every and self.cfg.eval.at_end and self.signal is None
                and self.start_step < self.step < every):
            self._say(f"no evaluation at the end: the run ended at step {self.step}, before "
                      f"eval.every={every} (give a smaller eval.every to evaluate a short run)")

    def evaluation_dropped(self, step: int) -> None:
        """The evaluation of ``step`` in progress was abandoned: say so and why."""
        why = f"stopped by signal {self.signal}" if self.signal else "eval.at_end=false"
        self._say(f"the evaluation of step {step} in progress was dropped ({why})")

    def _say(self, line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    # ---- outputs ------------------------------------------------------------------------
    def _log(self, step: int) -> None:
        self.logged_step = step
        now = time.monotonic()
        reps = list(self.reports.values())
        points = float(sum(r.data_points for r in reps))
        frames = float(sum(r.env_frames for r in reps))
        seconds = [asdict(r.seconds) for r in reps]
        times = {k: sum(s[k] for s in seconds) for k in FRACTIONS}
        t_prev, points_prev, frames_prev, times_prev = self._window
        dt = max(now - t_prev, 1e-9)
        self._window = (now, points, frames, times)
        scores = [r.online_score for r in reps if r.online_score is not None]
        record = {
            "step": step, "time_s": round(self.elapsed(), 3),
            "perf/data_points_per_s": (points - points_prev) / dt,
            "perf/env_frames_per_s": (frames - frames_prev) / dt,
            "train/online_score": float(np.mean(scores)) if scores else None,
            "perf/effective_batch": self.cfg.train.batch_size * self.extra.get(
                "dist/replicas", 1),
            # the parameter servers' rate for the update from this step (train.lr_schedule)
            "train/lr": learning_rate(self.cfg.train.lr, self.cfg.train.lr_schedule, step,
                                      self.cfg.train.max_steps),
        }
        averaged = [r.averaged_metrics() for r in reps]
        for key in AVERAGED:
            # a worker's final report (losses None) can arrive while the chief still logs;
            # synthetic workers report none
            values = [v for a in averaged if (v := a[key]) is not None]
            record[key] = float(np.mean(values)) if values else None
        for k in FRACTIONS:  # fraction of wall time per worker, averaged over workers
            record[f"time/{k}"] = (times[k] - times_prev.get(k, 0.0)) / dt / max(len(reps), 1)
        record.update(self.extra)
        self.metrics.write(record)
        self._write_scalars(step, record)
        self.progress.update(step, record)

    def _write_scalars(self, step: int, record: dict) -> None:
        for log in self.scalar_logs:
            log.write(step, record)

    def _write_summary(self) -> None:
        time_s = self.elapsed()
        if self.step == self.start_step:  # trained nothing: the clock of the record it resumed
            time_s = max(time_s, self.summary.get("time_s", 0.0))
        self.run_dir.write_summary({**self.summary, "final_step": self.step, "time_s": time_s})

    def __enter__(self) -> Chief:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if error is None:
            self._say_if_not_evaluated_at_end()
        self.close(write=not isinstance(error, DiskFull))

    def close(self, write: bool = True) -> None:
        """Log the last step if it was not (whatever ended the run: a signal, the target
        score, an error) and flush everything; the summary records where the run stopped and
        why. ``write=False`` (the file system is full): only close the files."""
        try:
            if write:
                if self.step > self.logged_step:
                    self._log(self.step)
                self.summary.update(stop_reason=self.stop_reason, final_step=self.step)
                self._write_summary()
        finally:
            self.progress.close()
            self.metrics.close()
            self.evals.close()
            for log in self.scalar_logs:
                log.close()
