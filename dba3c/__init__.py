"""dba3c: distributed synchronous BA3C (batched advantage actor-critic) for Atari on CPUs."""

import os

__version__ = "0.1.0"

# TensorFlow's oneDNN CPU kernels, before any module imports TensorFlow. TensorFlow turns
# them on by itself only on CPUs with AVX-512 VNNI or newer; on an AVX2 AMD EPYC they trained
# the paper network 1.8x and the A3C-FF network 1.75x faster than TensorFlow's own kernels
# (docs/benchmarks.md, 2026-11-23). Same function, another float summation order.
# TF_ENABLE_ONEDNN_OPTS=0 in the environment keeps TensorFlow's own kernels.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
