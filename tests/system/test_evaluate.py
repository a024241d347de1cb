"""``dba3c evaluate``: offline evaluation of a real run's checkpoint, and its gameplay video."""

from __future__ import annotations

import json

import imageio.v3 as iio
import pytest

from tests.support import dba3c

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """A few steps of real Breakout with the A3C-FF network."""
    run = tmp_path_factory.mktemp("eval") / "run"
    dba3c("train", "configs/breakout.yaml", f"run.dir={run}", "model.kind=a3c_ff",
          "env.num_envs=4", "env.batch_size=2", "train.batch_size=8", "train.max_steps=5",
          "eval.every=0", "run.progress=none")
    return run


def test_evaluate_plays_the_asked_games_and_writes_decodable_videos(real_run, tmp_path):
    frame_skip, max_frames, scale = 4, 400, 4
    mp4, gif = tmp_path / "game.mp4", tmp_path / "game.gif"
    proc = dba3c("evaluate", real_run, "--episodes", "3", "--video", mp4, "--video", gif,
                 f"eval.max_frames={max_frames}", "eval.noop_max=0", "eval.num_envs=2")
    result = json.loads(proc.stdout)
    assert result["checkpoint_step"] == 5 and result["episodes"] == 3
    assert result["protocol"] == "paper"
    assert result["hns"] == pytest.approx((result["mean"] - 1.7) / (30.5 - 1.7))  # Breakout
    assert len(result["scores"]) == 3 and result["min"] <= result["mean"] <= result["max"]
    assert [f"game {n}/3" in proc.stderr for n in (1, 2, 3)] == [True] * 3
    # An untrained agent cannot lose five Breakout lives in 100 steps, so the game ends at
    # the frame cap: max_frames / frame_skip agent steps, one video frame each.
    expected = max_frames // frame_skip
    assert result["video"]["frames"] == expected
    for path in (mp4, gif):
        frames = iio.imread(path, index=None) if path == gif else \
            iio.imread(path, plugin="FFMPEG")
        assert frames.shape == (expected, 84 * scale, 84 * scale, 3), path
        assert frames[:, 40:, :, :].std() > 0  # a picture, not a blank screen


def test_evaluate_a_checkpoint_file_equals_evaluate_its_run_dir(real_run):
    ckpt = sorted((real_run / "checkpoints").iterdir())[-1]
    args = ["--episodes", "2", "eval.max_frames=200", "eval.num_envs=2"]
    by_file = json.loads(dba3c("evaluate", ckpt, *args).stdout)
    by_dir = json.loads(dba3c("evaluate", real_run, *args).stdout)
    assert by_file == by_dir  # greedy, same seed: the same games


def test_units_counts_each_layers_active_units_on_frames_of_play(real_run):
    result = json.loads(dba3c("units", real_run, "--frames", "40").stdout)
    assert result["checkpoint_step"] == 5 and result["frames"] == 40
    layers = [(layer["layer"], layer["units"]) for layer in result["layers"]]
    assert layers == [("conv0", 16), ("conv1", 32), ("fc2", 128)]  # a3c_ff, model.hidden 128
    assert all(0 <= layer["active"] <= layer["units"] for layer in result["layers"])
    bad = dba3c("units", real_run, "--frames", "0", check=False)
    assert bad.returncode == 2 and bad.stderr.strip() == "error: --frames 0 must be at least 1"
