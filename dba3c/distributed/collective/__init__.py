"""Collective aggregation (``dist.aggregation: collective``): no parameter-server ranks; the
training ranks hold the shards and meet in reduce-scatter and allgather.

- :mod:`.client`: ``CollectiveClient``, a rank's parameter store (one step: reduce-scatter,
  the optimizer on its own shard, allgather);
- :mod:`.chief_link`: the chief's side (start state, reports, checkpoints, watchdog) and the
  other ranks' side of it;
- :mod:`.ranks`: each rank's loop, the chief's and the others';
- :mod:`.staged`: the overlapped step (communication hidden behind the backward pass and
  the next forward pass).
"""
