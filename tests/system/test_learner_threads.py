"""The Learner (dba3c.learning.learner) in a fresh process: TensorFlow's thread pools from the
config, the oneDNN default, and the staged gradient's callbacks on one inter-op thread."""

import os
import subprocess
import sys

from tests.support import python_output


def test_a_learner_sizes_tensorflow_s_thread_pools_from_the_config():
    # in a fresh process: the pools take the configured sizes, a second Learner with the
    # same sizes is fine, one asking for other sizes after TensorFlow started is refused
    code = (
        "import numpy as np, tensorflow as tf\n"
        "from dba3c.config import TrainConfig\n"
        "from dba3c.learning.learner import Learner\n"
        "from dba3c.learning.models import NetSpec\n"
        "spec = NetSpec('mlp', 16, (4,), 3)\n"
        "cfg = TrainConfig(intra_op_threads=1, inter_op_threads=3)\n"
        "Learner(spec, cfg, spec.init_params(0)).predict(np.zeros((2, 4), np.float32))\n"
        "print(tf.config.threading.get_intra_op_parallelism_threads(),\n"
        "      tf.config.threading.get_inter_op_parallelism_threads())\n"
        "Learner(spec, cfg, spec.init_params(1))\n"
        "try:\n"
        "    Learner(spec, TrainConfig(intra_op_threads=2), spec.init_params(2))\n"
        "except RuntimeError:\n"
        "    print('refused')\n")
    assert python_output(code, timeout=300) == ["1", "3", "refused"]


def test_dba3c_turns_on_onednn_kernels_unless_the_environment_says_otherwise():
    probe = ("import os, dba3c; from dba3c.learning.learner import onednn_enabled; "
             "print(os.environ['TF_ENABLE_ONEDNN_OPTS'], onednn_enabled())")
    for environ, expected in (({}, "1 True"), ({"TF_ENABLE_ONEDNN_OPTS": "0"}, "0 False")):
        env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
        out = subprocess.run([sys.executable, "-c", probe], env={**env, **environ},
                             capture_output=True, text=True, check=True).stdout
        assert out.split("\n")[-2] == expected, out


def test_buckets_assigned_from_the_callbacks_on_one_inter_op_thread():
    # the callbacks run inside the staged gradient's graph execution: with one inter-op
    # thread a callback calling a tf.function would wait forever; assign_bucket's eager
    # assigns do not (a subprocess: the thread pools are fixed per process)
    code = (
        "import numpy as np\n"
        "from dba3c.config import TrainConfig\n"
        "from dba3c.learning.learner import Learner\n"
        "from dba3c.learning.models import NetSpec\n"
        "from dba3c.training.worker import synthetic_batch\n"
        "spec = NetSpec('a3c_ff', 32, (4, 84, 84), 6)\n"
        "cfg = TrainConfig(intra_op_threads=1, inter_op_threads=1)\n"
        "learner = Learner(spec, cfg, spec.init_params(1), staged=True)\n"
        "batch = synthetic_batch(spec, 4, (0, 0, 3))\n"
        "theta2 = spec.init_params(2)\n"
        "ends = [*learner.buckets, len(theta2)]\n"
        "got = []\n"
        "learner.staged_gradient(batch.obs, batch.a, batch.R,\n"
        "    lambda b: learner.assign_bucket(b, theta2[ends[b]:ends[b + 1]]),\n"
        "    lambda b, g: got.insert(0, g))\n"
        "learner.set_params(theta2)\n"
        "want = learner.gradient(batch.obs, batch.a, batch.R)[0]\n"
        "print(np.abs(np.concatenate(got) - want).max() <= 1e-5 * np.abs(want).max())\n")
    assert python_output(code, timeout=120) == ["True"]
