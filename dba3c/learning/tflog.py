"""Keep TensorFlow's C++ start-up log lines out of the terminal unless the user asked for them.

While ``import tensorflow`` loads its libraries, they log through abseil before abseil is
initialised, and that path ignores ``TF_CPP_MIN_LOG_LEVEL``: on CPUs where oneDNN is on, every
process prints "oneDNN custom operations are on ..." twice, each time after abseil's
"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR".
(Measured with TensorFlow 2.21: ``TF_CPP_MIN_LOG_LEVEL=2`` hides the CPU-feature notice but not
these four lines; ``TF_ENABLE_ONEDNN_OPTS=0`` would hide them by turning oneDNN off, which
changes results and speed, so it is not used.)

:func:`quiet_import` filters this process's stderr (file descriptor 2, where C++ writes) while
a module is first imported: lines below the requested level are dropped, every other line is
passed on, in order, when the import ends. Numerics are untouched.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import os
import re
import sys
import tempfile
from collections.abc import Iterator, MutableMapping, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

ABSL_PREAMBLE = "WARNING: All log messages before absl::InitializeLog() is called"
# abseil's prefix, e.g. "I0000 00:00:1795450614.750164    7826 port.cc:153] ..."
_ABSL_LINE = re.compile(r"([IWEF])\d{4} [\d:.]+\s+\d+ \S+:\d+\] ")
SEVERITIES = "IWEF"  # info, warning, error, fatal: TF_CPP_MIN_LOG_LEVEL 1 hides I, 2 hides W...


def is_below_level(line: str, min_level: int) -> bool:
    """Whether ``line`` is a C++ log line that ``TF_CPP_MIN_LOG_LEVEL=min_level`` hides:
    abseil's preamble (from level 1) or an abseil line of a lower severity."""
    if min_level < 1:
        return False
    if line.startswith(ABSL_PREAMBLE):
        return True
    match = _ABSL_LINE.match(line)
    return match is not None and SEVERITIES.index(match.group(1)) < min_level


@contextlib.contextmanager
def filtered_stderr(min_level: int) -> Iterator[None]:
    """Hold back what is written to file descriptor 2 inside the block; afterwards write it
    out without the lines :func:`is_below_level` drops."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [line for line in held.read().splitlines(keepends=True)
                    if not is_below_level(line.decode(errors="replace"), min_level)]
            os.write(2, b"".join(kept))


class _QuietLoader(importlib.abc.Loader):
    """A module's own loader, executing the module inside :func:`filtered_stderr`."""

    def __init__(self, loader: importlib.abc.Loader, min_level: int):
        self._loader, self._min_level = loader, min_level

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        with filtered_stderr(self._min_level):
            self._loader.exec_module(module)

    def __getattr__(self, name: str) -> Any:  # resource readers and the like: the real loader's
        return getattr(self._loader, name)


class _QuietFinder(importlib.abc.MetaPathFinder):
    """Finds ``name`` once, the usual way, and hands it a :class:`_QuietLoader`."""

    def __init__(self, name: str, min_level: int):
        self.name, self._min_level = name, min_level

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once: the real finders do the rest
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader, self._min_level)
        return spec


def quiet_import(name: str, min_level: int) -> None:
    """Make the first import of top-level module ``name`` in this process drop the C++ log
    lines that ``TF_CPP_MIN_LOG_LEVEL=min_level`` should have hidden (nothing at level 0, when
    it is already imported, or when an earlier call still waits for that import)."""
    waiting = any(isinstance(f, _QuietFinder) and f.name == name for f in sys.meta_path)
    if min_level >= 1 and name not in sys.modules and not waiting:
        sys.meta_path.insert(0, _QuietFinder(name, min_level))


def quiet_tensorflow(environ: MutableMapping[str, str]) -> None:
    """For an entry point: TensorFlow's C++ logging at ``TF_CPP_MIN_LOG_LEVEL`` 2 unless the
    user set a level in ``environ`` (theirs wins), and its start-up lines below that level
    dropped (:func:`quiet_import`)."""
    level = environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    quiet_import("tensorflow", int(level) if level.isdigit() else 0)
