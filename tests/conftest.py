"""Pytest fixtures and the suite's two lanes; the helpers the tests share are in
tests/support."""

from __future__ import annotations

from pathlib import Path

import pytest

import dba3c as _dba3c  # noqa: F401  (sets TensorFlow's oneDNN default before tests import it)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The units of ``pytest -n 2 --dist loadgroup`` (``make test``): the tests that start
    Slurm or the emulated cluster's namespaces run one after another in one worker (one
    cluster can exist at a time; they spend most of their time waiting on the scheduler),
    every other module as a whole in whichever worker is free (its module fixtures made
    once). Without xdist the marks do nothing."""
    for item in items:
        cluster = item.get_closest_marker("slurm") or item.get_closest_marker("namespaces")
        module = item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group("cluster" if cluster else module))


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A fresh run directory path."""
    return tmp_path / "run"
