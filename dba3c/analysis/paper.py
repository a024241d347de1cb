"""The paper's Table 3 (Adamski et al. 2018, "Distributed Deep Reinforcement Learning: learn
how to play Atari games in 21 minutes"): for six games, the mean score of 50 consecutive
greedy games and the wall time in hours the paper's own system (DDRL A3C, 64 nodes of 12
cores) took to reach it, beside the results it quotes for GA3C, BA3C and A3C.

The numbers live in ``paper_table3.csv`` beside this module (package data), one line per
game and system: ``game,system,score,hours`` with ``-`` where the paper reports nothing.
This module is the only reader of that file.
"""

from __future__ import annotations

import csv
import functools
import io
from importlib import resources
from typing import NamedTuple

DATA = "paper_table3.csv"
# the paper's columns, in its order; the first is its own system
SYSTEMS = ("DDRL A3C", "GA3C", "BA3C", "A3C")
PAPER = SYSTEMS[0]
NOT_REPORTED = "-"


class Result(NamedTuple):
    """One cell of the table: a mean greedy score and the wall hours to reach it."""

    score: float
    hours: float


# game -> system -> its result, None where the paper reports none
Table3 = dict[str, dict[str, Result | None]]


def parse_table3(text: str) -> Table3:
    """The table in the text of :data:`DATA` (lines starting with ``#`` are comments).
    Raises ValueError naming the line of a bad row, and for a game that lacks a system or
    repeats one."""
    rows = csv.DictReader(io.StringIO("".join(
        line for line in io.StringIO(text) if not line.startswith("#"))))
    if rows.fieldnames != ["game", "system", "score", "hours"]:
        raise ValueError(f"{DATA}: expected the columns game,system,score,hours, found "
                         f"{rows.fieldnames}")
    table: Table3 = {}
    for row in rows:
        where = f"{DATA}: line {rows.line_num} of the table"
        if row["system"] not in SYSTEMS or row["system"] in table.get(row["game"], {}):
            raise ValueError(f"{where}: system {row['system']!r} is not one of {SYSTEMS} "
                             f"or repeats one of {row['game']}")
        cells = (row["score"], row["hours"])
        try:
            result = None if cells == (NOT_REPORTED,) * 2 else Result(*map(float, cells))
        except (TypeError, ValueError):
            raise ValueError(f"{where}: score and hours must both be numbers or both "
                             f"{NOT_REPORTED!r}, found {cells}") from None
        table.setdefault(row["game"], {})[row["system"]] = result
    incomplete = [game for game, systems in table.items() if len(systems) != len(SYSTEMS)]
    if incomplete:
        raise ValueError(f"{DATA}: {', '.join(incomplete)} lack(s) a line for some of "
                         f"{', '.join(SYSTEMS)}")
    return table


@functools.cache
def table3() -> Table3:
    """The paper's Table 3, read once from the package's :data:`DATA`."""
    return parse_table3(resources.files(__package__).joinpath(DATA).read_text("utf-8"))


def paper_result(game: str) -> Result:
    """The paper's own result (:data:`PAPER`) for an ale-py ROM name. Raises ValueError
    naming the games of the table for any other."""
    result = table3().get(game, {}).get(PAPER)
    if result is None:
        raise ValueError(f"{game!r} is not a game of the paper's Table 3 (its games: "
                         f"{', '.join(sorted(table3()))})")
    return result
