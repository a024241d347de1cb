"""The message format: tags, headers and payloads of the float32/float64/int64 buffers."""

from __future__ import annotations

import numpy as np

GRAD, PARAMS, SNAPSHOT, STATE, PSINFO, STATS, CONTROL, EVAL, STATUS = range(1, 10)
HEADER = 8  # float32 slots = 4 int64
STOP, STOP_AT, FROZEN, QUERY = 1, 2, 3, 4
REPORT_KEYS = ("loss/policy", "loss/value", "loss/entropy", "loss/total", "perf/policy_lag",
               "count/data_points", "count/env_frames", "count/episodes",
               "train/online_score", "time/compute", "time/wait_data", "time/wait_params",
               "time/predict", "time/emulate")


def message(n: int) -> np.ndarray:
    """A float32 message buffer with room for the header and ``n`` payload values."""
    return np.zeros(HEADER + n, np.float32)


def header(buf: np.ndarray) -> np.ndarray:
    """The int64 [4] header view of a message buffer."""
    return buf[:HEADER].view(np.int64)


def payload(buf: np.ndarray) -> np.ndarray:
    """The float32 payload view of a message buffer."""
    return buf[HEADER:]


def report_vector(report: dict, final: bool) -> np.ndarray:
    """A worker report as float64 [len(REPORT_KEYS) + 1] (None -> NaN; last slot: final)."""
    values = [report.get(k) for k in REPORT_KEYS]
    return np.array([np.nan if v is None else v for v in values] + [float(final)], np.float64)


def report_dict(vec: np.ndarray) -> tuple[dict, bool]:
    """Inverse of :func:`report_vector`."""
    report = {k: (None if np.isnan(v) else float(v)) for k, v in zip(REPORT_KEYS, vec)}
    return report, bool(vec[-1])

