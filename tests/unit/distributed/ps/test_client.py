"""A worker's parameter-server client (dba3c.distributed.ps.client), fed by hand on the
in-process transport."""

from __future__ import annotations

import numpy as np

from dba3c.distributed.ps.client import RemoteParameterClient
from dba3c.distributed.roles import make_roles
from dba3c.distributed.transport.in_process import InProcessTransport
from dba3c.distributed.wire import (
    ParamsMsg,
    Tag,
)
from tests.support.world import N, make_cfg


def test_a_worker_trains_no_further_once_it_holds_the_final_parameters():
    # PARAMS(final) and DONE are two messages: a worker that looks between them must not
    # take the final parameters for a new step (it used to train one step too many)
    cfg = make_cfg(workers=1, ps=1, max_steps=1)
    chief_t, ps_t, worker_t = InProcessTransport.create_world(3)
    client = RemoteParameterClient(worker_t, make_roles(3, cfg), cfg, N)
    ps_t.isend(ParamsMsg(0, np.zeros(N, np.float32)).encode(), 2, Tag.PARAMS)
    assert client.pull().version == 0
    ps_t.isend(ParamsMsg(1, np.ones(N, np.float32), final=True).encode(), 2, Tag.PARAMS)
    assert client.push(0, np.zeros(N, np.float32)) is None  # no DONE has come yet
