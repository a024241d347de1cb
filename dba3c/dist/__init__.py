"""Distributed BA3C over a :class:`~dba3c.transport.Transport`: chief, parameter servers,
workers and an optional evaluator (layout in :mod:`dba3c.roles`).

Messages are float32 buffers whose first 8 slots are an int64 header
(version, aux, flag, 0); the payload follows. Tags:

  GRAD     worker -> PS p   header (version computed at, rank); payload g[shard p].
                            version -1 = BYE (the worker sends nothing more).
  PARAMS   PS p -> worker   header (version, non-finite streak); payload theta[shard p].
                            version -1 = DONE (the run is over).
  SNAPSHOT PS p -> evaluator  like PARAMS, every ``eval.every`` steps.
  STATE    chief <-> PS p   header (version, adam count, final); payload theta, m, v of the
                            shard: the chief's INIT at start, the PS's checkpoints and final.
  PSINFO   PS -> chief      float64 [version, dropped, nonfinite, staleness sum/count/max].
  STATS    worker -> chief  float64 report (REPORT_KEYS); flag slot marks the last one.
  CONTROL  chief <-> PS     int64 [command, argument]: STOP, STOP_AT s, QUERY, and the PS's
                            reply to STOP.
  EVAL     evaluator -> chief float64 [step, n, scores...]; step -1 = evaluator finished.
  STATUS   PS -> chief      int64 [version, n, ranks...]: the answer to QUERY, the workers
                            whose gradient for its current version the PS holds.

Synchronous step t: each worker sends its gradient at theta_t to every PS; each PS averages
the first R gradients for t, applies Adam and broadcasts theta_{t+1}; older gradients are
dropped and counted. Workers always train on the newest version for which they hold every
shard. Asynchronous: each PS applies every gradient on arrival and answers only its sender.
Stopping: a PS finishes at ``train.max_steps``; otherwise the chief sends STOP, each PS
freezes and replies its version, and the chief sends STOP_AT (the highest reply), so every
shard ends at the same version. A PS then sends its final state, DONE, and drains gradients
until every worker said BYE, so no message is left in flight.

Stall watchdog (:mod:`dba3c.watchdog`): when no global step completes for
``dist.stall_timeout`` seconds the chief QUERYs the parameter servers, names the silent ones
and the workers whose gradient they lack, and fails the job.
"""
