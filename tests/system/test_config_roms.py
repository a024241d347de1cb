"""The config's Atari games (dba3c.config.ale_games) come from ale-py's ROM list, which a
fresh process loading a config reads without importing ale_py or gymnasium."""



from dba3c.config import (
    ale_games,
)
from tests.support import ROOT

# --------------------------------------------------------------------------- roles

def test_ale_games_are_ale_pys_roms_without_importing_it():
    """The ROM list comes from ale-py's own md5.json in a fresh process that loads a config
    but imports neither ale_py nor gymnasium (each rank of a run loads its config)."""
    import subprocess
    import sys

    from ale_py.roms import get_all_rom_ids

    assert ale_games() == tuple(sorted(get_all_rom_ids()))
    assert "breakout" in ale_games() and "pong" in ale_games()
    code = ("import sys; from dba3c.preset import load_config; "
            "load_config('configs/breakout.yaml', ['env.id=pong']); "
            "print(sorted(m for m in ('ale_py', 'gymnasium') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"
