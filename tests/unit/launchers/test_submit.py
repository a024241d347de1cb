"""``dba3c submit``'s pieces (dba3c.launchers.submit) without Slurm: the line of sbatch's
refusal its one ``error:`` line quotes."""

from __future__ import annotations

from dba3c.launchers.submit import sbatch_message


def test_sbatch_message_is_its_last_line_naming_an_error():
    assert sbatch_message("sbatch: error: Batch job submission failed: Invalid qos "
                          "specification\n") == ("sbatch: error: Batch job submission failed: "
                                                 "Invalid qos specification")
    assert sbatch_message("sbatch: warning: x\nsbatch: error: first\nsbatch: error: Batch job "
                          "submission failed: Invalid account\n\nsome trailer\n") == \
        "sbatch: error: Batch job submission failed: Invalid account"
    assert sbatch_message("  it failed  \n\n") == "it failed"
    assert sbatch_message("") == "(no message)"
