"""``dba3c submit``'s pieces (dba3c.launchers.submit) without Slurm: the grid, and the line
of sbatch's refusal its one ``error:`` line quotes."""

from __future__ import annotations

import pytest

from dba3c.errors import UserError
from dba3c.launchers.submit import grid_overrides, sbatch_message


def test_the_grid_is_every_combination_and_a_key_given_twice_is_refused():
    assert grid_overrides(["run.seed=0,1", "dist.ps=2"]) == [["run.seed=0", "dist.ps=2"],
                                                             ["run.seed=1", "dist.ps=2"]]
    assert grid_overrides([]) == [[]]
    with pytest.raises(UserError, match=r"^--grid run.seed is given twice; give each key once, "
                                        r"with all its values \(--grid run.seed=v1,v2,...\)$"):
        grid_overrides(["run.seed=0,1", "dist.ps=1,2", "run.seed=2"])


def test_sbatch_message_is_its_last_line_naming_an_error():
    assert sbatch_message("sbatch: error: Batch job submission failed: Invalid qos "
                          "specification\n") == ("sbatch: error: Batch job submission failed: "
                                                 "Invalid qos specification")
    assert sbatch_message("sbatch: warning: x\nsbatch: error: first\nsbatch: error: Batch job "
                          "submission failed: Invalid account\n\nsome trailer\n") == \
        "sbatch: error: Batch job submission failed: Invalid account"
    assert sbatch_message("  it failed  \n\n") == "it failed"
    assert sbatch_message("") == "(no message)"
