"""Distributed BA3C over a :class:`~dba3c.distributed.transport.Transport`: chief, parameter
servers,
workers and an optional evaluator (which rank plays which: :mod:`dba3c.distributed.roles`).

Reading order, one module per piece:

  report.py         WorkerReport: the one schema of a worker's counters and losses
  wire.py           the message kinds (Tag), one frozen dataclass with encode/decode each
  mailbox.py        Sender (sends kept alive until done), Inbox (a standing typed receive),
                    ShardFeed (the newest parameters from every PS, put together)
  ps.py             ParameterServer: one shard's state machine, driven by poll()
  worker_client.py  RemoteParameterClient: a worker's pull/push over the PS ranks
  chief_link.py     ChiefLink: the chief's mailboxes, the stop protocol, the stall watchdog
  evaluator.py      EvaluatorRank: plays the newest complete snapshot
  collective.py     dist.aggregation: collective: no PS ranks; CollectiveClient (reduce-
                    scatter, Adam on the own shard, allgather), the chief's link, each loop
  run.py            run_rank / train_distributed: each rank plays its role to the end

Synchronous step t: each worker sends its gradient at theta_t to every PS; each PS averages
the first R gradients for t, applies Adam and broadcasts theta_{t+1}; older gradients are
dropped and counted. Workers always train on the newest version for which they hold every
shard. Asynchronous: each PS applies every gradient on arrival and answers only its sender.
Stopping: a PS finishes at ``train.max_steps``; otherwise the chief sends STOP, each PS
freezes and replies its version, and the chief sends STOP_AT (the highest reply), so every
shard ends at the same version. The parameters of that last version are marked final (a
worker trains no further on them); the PS then sends its final state, DONE, and drains
gradients until every worker said BYE, so no message is left in flight.

Stall watchdog (:mod:`dba3c.distributed.watchdog`): when no global step completes for
``dist.stall_timeout`` seconds the chief QUERYs the parameter servers, names the silent ones
and the workers whose gradient they lack, and fails the job.
"""
