"""The optimizers through the command line: an RMSProp run with a linear rate resumes with
identical state, another optimizer cannot resume a run, and parameter servers run the
configured optimizer."""

import numpy as np
import pytest

from tests.support import SYNTH, dba3c, latest_checkpoint, read_jsonl


def test_rmsprop_linear_run_resumes_with_identical_state(tmp_path):
    """The command line: 6 steps + resume to 12 == 12 steps in one go (synthetic data)."""
    common = ["configs/breakout.yaml", *SYNTH, "model.kind=a3c_ff", "train.batch_size=8",
              "run.checkpoint_every=3", "train.max_seconds=0", "optim.kind=rmsprop",
              "train.lr_schedule=linear", "train.lr=0.01"]
    once, twice = tmp_path / "once", tmp_path / "twice"
    dba3c("train", *common, f"run.dir={once}", "train.max_steps=12")
    # the schedule decays to 0 at train.max_steps: the first leg must plan for 12 steps too
    dba3c("train", *common, f"run.dir={twice}", "train.max_steps=12", "debug.fail_rank=0",
          "debug.fail_step=6", check=False)
    assert latest_checkpoint(twice).step == 6
    dba3c("train", *common, f"run.dir={twice}", "train.max_steps=12")
    a, b = latest_checkpoint(once), latest_checkpoint(twice)
    assert a.step == b.step == 12 and a.adam_count == b.adam_count == 12
    np.testing.assert_allclose(b.theta, a.theta, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(b.adam_v, a.adam_v, rtol=1e-6, atol=1e-6)
    assert not b.adam_m.any()  # RMSProp leaves the first-moment slot unused
    metrics = read_jsonl(twice / "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(1, 13))
    # the rate of the next update, logged: 0.01 x (1 - step / 12), 0 at the end
    assert [m["train/lr"] for m in metrics] == pytest.approx(
        [0.01 * (12 - step) / 12 for step in range(1, 13)])


def test_resuming_with_another_optimizer_is_refused(tmp_path):
    common = ["configs/breakout.yaml", *SYNTH, "model.kind=a3c_ff", "train.batch_size=8",
              "train.max_seconds=0", f"run.dir={tmp_path / 'run'}"]
    dba3c("train", *common, "train.max_steps=2")
    before = latest_checkpoint(tmp_path / "run")
    proc = dba3c("train", *common, "train.max_steps=4", "optim.kind=rmsprop", check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: checkpoint step 2 in {tmp_path / 'run'} holds the state of optim.kind=adam, "
        f"not of optim.kind=rmsprop; resume with optim.kind=adam or use a new run.dir")
    assert latest_checkpoint(tmp_path / "run").step == before.step == 2


@pytest.mark.slow
def test_parameter_servers_run_the_configured_optimizer(tmp_path):
    """1 worker + 2 parameter servers == one process, with RMSProp at a linear rate."""
    common = ["configs/breakout.yaml", *SYNTH, "model.kind=a3c_ff", "train.batch_size=8",
              "train.max_steps=5", "train.max_seconds=0", "optim.kind=rmsprop",
              "train.lr_schedule=linear", "train.lr=0.01"]
    dba3c("train", *common, f"run.dir={tmp_path / 'single'}")
    dba3c("launch", common[0], "--workers", 1, "--ps", 2, *common[1:],
          f"run.dir={tmp_path / 'ps2'}", timeout=240)
    ref, got = latest_checkpoint(tmp_path / "single"), latest_checkpoint(tmp_path / "ps2")
    assert got.step == ref.step == 5 and got.adam_count == ref.adam_count == 5
    np.testing.assert_allclose(got.theta, ref.theta, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got.adam_v, ref.adam_v, rtol=1e-6, atol=1e-6)
    assert not got.adam_m.any()
