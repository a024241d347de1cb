"""A preset loaded and checked against the world it will run in.

:mod:`dba3c.config` reads YAML into the frozen :class:`~dba3c.config.Config` and checks all
that needs no outside facts: types, ranges, rules between keys. Three rules need facts from
other modules, and live here, above them, so that ``config`` imports none of them:

- the smallest frame a network's layers take (:func:`dba3c.learning.models.min_frame_size`);
- that ``dist.ps`` parameter servers each get a non-empty shard, which needs the parameter
  count (the simulator's spaces and the network: :func:`num_params_of`);
- that ``eval.stop_below_target`` has a game whose highest score is known and at least the
  target (:data:`dba3c.games.scores.MAX_SCORE`).

The command line, the launchers, the benchmarks and checkpoints load configs through this
module; every problem, of either kind, is reported at once in one ``UserError``.
"""

from __future__ import annotations

from collections.abc import Sequence

from dba3c import config
from dba3c.config import Config, is_atari


def num_params_of(cfg: Config) -> int:
    """The parameter count of the configured network (no TensorFlow: the pure layout)."""
    from dba3c.games.envs import env_spaces
    from dba3c.learning.models import make_net_spec

    return make_net_spec(cfg.model, *env_spaces(cfg)).layout().num_params


def world_errors(cfg: Config) -> list[str]:
    """The problems of ``cfg`` that only the network, the simulator or the score tables
    reveal (none when the env and the network do not match: config reports that)."""
    from dba3c.games.scores import MAX_SCORE
    from dba3c.learning.models import min_frame_size

    errors = []
    atari = is_atari(cfg.env.id)
    if atari == (cfg.model.kind != "mlp"):  # else config's rule names the mismatch
        if atari and cfg.model.frame_size < (smallest := min_frame_size(cfg.model.kind)):
            errors.append(f"model.frame_size={cfg.model.frame_size} is too small for "
                          f"model.kind={cfg.model.kind!r}: its layers need frames of at "
                          f"least {smallest}")
        elif cfg.dist.ps > 1:  # one shard always fits; counting opens a simulator briefly
            problem = config.num_shards_error(cfg.dist.ps, num_params_of(cfg))
            errors += [problem] if problem else []
    if cfg.eval.stop_below_target:
        if cfg.env.id not in MAX_SCORE:
            errors.append(f"eval.stop_below_target=true needs a game whose highest score is "
                          f"known ({', '.join(sorted(MAX_SCORE))}), not env.id={cfg.env.id!r}")
        elif cfg.eval.target_score > MAX_SCORE[cfg.env.id]:
            errors.append(f"eval.target_score={cfg.eval.target_score:g} is above "
                          f"{cfg.env.id}'s highest score {MAX_SCORE[cfg.env.id]:g}: with "
                          f"eval.stop_below_target=true no evaluation would play a game")
    return errors


def validate(cfg: Config) -> Config:
    """``cfg`` if every rule holds, of config's and of the world's; else one UserError
    listing every problem."""
    return config.validate(cfg, world_errors)


def from_dict(tree: dict, source: str = "config") -> Config:
    """:func:`dba3c.config.from_dict` with the world's rules too."""
    return config.from_dict(tree, source, world_errors)


def load_config(path: str, overrides: Sequence[str] = ()) -> Config:
    """A YAML preset with ``KEY=VALUE`` overrides, every rule checked at once."""
    return config.load_config(path, overrides, world_errors)


def apply_overrides(cfg: Config, overrides: list[str], source: str = "config") -> Config:
    """``cfg`` with ``KEY=VALUE`` overrides applied, every rule checked again."""
    return config.apply_overrides(cfg, overrides, source, world_errors)
