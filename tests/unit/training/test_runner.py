"""The single-process parameter store (dba3c.training.runner.LocalParameterServer): a push
is one Adam step."""

import numpy as np

from dba3c.learning.rules import OptimizerState
from dba3c.training.runner import LocalParameterServer
from tests.support.adam import PAPER_ADAM


def test_local_parameter_server_push_is_one_adam_step():
    theta0 = np.array([0.5, -0.5], np.float32)
    ps = LocalParameterServer(theta0.copy(), OptimizerState.zeros(2), 7, PAPER_ADAM)
    p = ps.pull()
    assert p.version == 7
    np.testing.assert_array_equal(p.theta, theta0)
    nxt = ps.push(7, np.array([1.0, -1.0], np.float32))
    assert nxt.version == 8
    np.testing.assert_allclose(nxt.theta, [0.5 - 1e-3, -0.5 + 1e-3], rtol=1e-5)
    p.theta[:] = 99  # pulled copies are independent of the server's vector
    assert ps.pull().theta[0] != 99
