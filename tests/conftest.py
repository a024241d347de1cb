"""Pytest fixtures; the helpers the tests share are in tests/support."""

from __future__ import annotations

from pathlib import Path

import pytest

import dba3c as _dba3c  # noqa: F401  (sets TensorFlow's oneDNN default before tests import it)


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A fresh run directory path."""
    return tmp_path / "run"
