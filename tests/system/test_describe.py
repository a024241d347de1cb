"""``dba3c describe``: what a run would be and cost, without running it."""

from tests.support import dba3c


def test_the_paper_layout_shows_its_ranks_and_the_node_hours_it_can_spend():
    out = dba3c("describe", "configs/breakout_64.yaml", "--workers", "64").stdout
    assert "world_size: 69" in out and "ranks 1-4: parameter servers (4 shards)" in out
    # 69 nodes x (7200 s + 10 min margin) = 69 x 130 / 60 = 149.5 node-hours
    assert "allocation: 69 node(s) x 1 task(s) = 69 tasks" in out
    assert "time limit: 130 min -> at most 149.5 node-hours" in out
    assert "reaches 300 (eval.stop_at_target)" in out


def test_a_single_process_run_has_no_allocation():
    out = dba3c("describe", "configs/cartpole.yaml").stdout
    assert "world_size: 1" in out and "node-hours" not in out


def test_an_overrides_file_comes_before_the_command_line_keys(tmp_path):
    node = tmp_path / "node.yaml"
    node.write_text("env:\n  num_envs: 16\n  batch_size: 8\ntrain:\n  intra_op_threads: 6\n")
    out = dba3c("describe", "configs/breakout_64.yaml", "--overrides", node,
                "env.batch_size=4").stdout
    assert "num_envs: 16" in out and "batch_size: 4" in out and "intra_op_threads: 6" in out
    assert "ps: 4" in out  # the preset's layout stays


def test_a_bad_overrides_file_is_one_error_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("env: 3\n")
    proc = dba3c("describe", "configs/cartpole.yaml", "--overrides", bad, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: section 'env' in the overrides file {bad} must be a mapping of keys"]
