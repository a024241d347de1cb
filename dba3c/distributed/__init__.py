"""Distributed BA3C over a :class:`~dba3c.core.Transport`: chief, workers, an optional
evaluator, and the gradients' aggregation, by parameter-server ranks (``ps/``, the paper's)
or by collectives among the workers (``collective/``). Which rank plays which:
:mod:`dba3c.distributed.roles`.

Reading order:

  run.py           run_rank / train_distributed: each rank plays its role to the end
  single.py        train_single: a world of one process, on its LocalParameterServer (a
                   ShardServer of all of theta; W replicas with dist.emulate_workers)
  roles.py         which rank is chief, parameter server, worker or evaluator; shard plans
  wire.py          the message kinds (Tag), one frozen dataclass with encode/decode each
  mailbox.py       Sender (sends kept alive until done), Inbox (a standing typed receive),
                   ShardFeed (the newest parameters from every PS, put together)
  transport/       the transport layer: mpi.py (MpiTransport, the only module importing MPI),
                   in_process.py (InProcessTransport, for tests), waiting.py (waits that
                   never spin), poller.py, rank_output.py
  shard.py         ShardServer: one shard's optimizer and the aggregation rules, no I/O
  ps/              the paper's parameter servers: client.py, chief_link.py, ranks.py,
                   server.py (ParameterServer: one shard's state machine, driven by poll())
  collective/      no parameter servers: client.py, chief_link.py, ranks.py, staged.py
  chief_inbox.py   what reaches the chief in either mode: reports, evaluations, checkpoints
  evaluator.py     the evaluator rank: plays the newest complete snapshot
  watchdog.py      the stall clock and who is named when no step completes
  pacing.py        ReplyPacer: a parameter server's polls paced to its workers' replies
  synthetic.py     SyntheticWorker: timed waits and seeded gradients, no TensorFlow
                   (the emulated cluster's ranks)

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
