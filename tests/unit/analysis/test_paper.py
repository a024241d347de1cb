"""dba3c.analysis.paper: the paper's Table 3 as the package ships it."""

import configparser

import pytest

from dba3c.analysis import paper as P
from dba3c.games.scores import RANDOM_AND_HUMAN
from tests.support import ROOT

# Adamski et al. 2018, Table 3: score (wall hours) of DDRL A3C, GA3C, BA3C, A3C
TABLE_3 = {
    "beam_rider": ((14900, 2.7), (3000, 24), None, (15000, 15)),
    "breakout": ((350, 0.5), (350, 21), (400, 15), (500, 11)),
    "boxing": ((98, 0.5), (92, 2), None, None),
    "pong": ((20, 4), (18, 1), (17, 24), (20, 8)),
    "seaquest": ((1832, 0.5), (1706, 24), (1840, 24), (2300, 24)),
    "space_invaders": ((650, 0.5), (600, 24), (700, 24), (1400, 15)),
}


def test_the_shipped_table_is_the_papers():
    table = P.table3()
    assert list(table) == list(TABLE_3)  # the paper's order
    for game, cells in TABLE_3.items():
        assert [table[game][system] for system in P.SYSTEMS] == [
            None if cell is None else P.Result(*cell) for cell in cells]
    assert set(table) <= set(RANDOM_AND_HUMAN)  # every game has a human-normalized score
    assert P.paper_result("pong") == P.Result(20, 4)


def test_the_table_is_package_data():
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    assert P.DATA in setup["options.package_data"]["dba3c.analysis"].split()


def test_a_game_the_paper_does_not_report_is_refused_with_its_games():
    with pytest.raises(ValueError, match=r"^'alien' is not a game of the paper's Table 3 "
                                         r"\(its games: beam_rider, boxing, breakout, pong, "):
        P.paper_result("alien")


HEADER = "# a comment\ngame,system,score,hours\n"
ROWS = "".join(f"pong,{system},1,2\n" for system in P.SYSTEMS)


@pytest.mark.parametrize("text, message", [
    ("game,score\n", "expected the columns game,system,score,hours"),
    (HEADER + ROWS.replace("pong,GA3C,1,2", "pong,GA3C,1,-"),
     r"line 3 of the table: score and hours must both be numbers or both '-', found "
     r"\('1', '-'\)"),
    (HEADER + ROWS.replace("GA3C", "DDRL A3C"), "line 3 of the table: system 'DDRL A3C'"),
    (HEADER + ROWS.replace("pong,A3C,1,2\n", ""), "pong lack"),
])
def test_a_malformed_table_names_its_problem(text, message):
    with pytest.raises(ValueError, match=message):
        P.parse_table3(text)
    assert P.parse_table3(HEADER + ROWS)["pong"]["BA3C"] == P.Result(1, 2)
