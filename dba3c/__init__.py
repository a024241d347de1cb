"""dba3c: distributed synchronous BA3C (batched advantage actor-critic) for Atari on CPUs."""

__version__ = "0.1.0"
