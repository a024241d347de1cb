"""The paper's aggregation (``dist.aggregation: ps``): dedicated parameter-server ranks.

- :mod:`.client`: ``RemoteParameterClient``, a worker's parameter store over the PS ranks;
- :mod:`.chief_link`: the chief's side (start state, PS info and states, the stop protocol,
  the stall watchdog);
- :mod:`.ranks`: the worker's and the chief's loops;
- :mod:`.server`: ``ParameterServer``, one shard's state machine, and its loop ``run_ps``.
"""
