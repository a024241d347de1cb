"""A :class:`~dba3c.launchers.preflight.findings.RankReport` as a fixed-size byte buffer
(its JSON after a 4-byte length), so rank 0 can post its receives before any report
arrives."""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np

from dba3c.launchers.preflight.findings import RankReport

REPORT_BYTES = 16384                      # a report's JSON, with a 4-byte length in front


def encode_report(report: RankReport) -> np.ndarray:
    """A report as a fixed-size byte buffer: a 4-byte length, then its JSON."""
    data = json.dumps(asdict(report)).encode()
    if len(data) > REPORT_BYTES - 4:
        raise ValueError(f"a report of {len(data)} bytes exceeds {REPORT_BYTES - 4}")
    buf = np.zeros(REPORT_BYTES, np.uint8)
    buf[:4] = np.frombuffer(np.uint32(len(data)).tobytes(), np.uint8)
    buf[4:4 + len(data)] = np.frombuffer(data, np.uint8)
    return buf


def decode_report(buf: np.ndarray) -> RankReport:
    """What :func:`encode_report` wrote."""
    n = int(buf[:4].view(np.uint32)[0])
    d = json.loads(buf[4:4 + n].tobytes().decode())
    d["cpus"], d["pmi_vars"] = tuple(d["cpus"]), tuple(d["pmi_vars"])
    d["threads"] = tuple(d["threads"])
    return RankReport(**d)
