"""What a worker computes, without I/O: the network, the loss and the update rules.

  rl.py       n-step returns, the A3C loss's pieces, action sampling (pure NumPy/TensorFlow math)
  rollout.py  RolloutAssembler: simulator steps -> n-step data points -> mini-batches;
              GroupedAssembler: one per group of simulators (W emulated workers)
  models.py   NetSpec: the paper's network, A3C-FF and an MLP as pure layer specs; forward
  params.py   the flat parameter vector: layout, shards (ShardPlan), per-layer buckets
  learner.py  Learner: TensorFlow predict, gradient, staged gradient, parameter loading
  rules.py    OptimizerState; adam_update and rmsprop_update on a flat shard
  fpenv.py    subnormals_flushed: the update rules' NumPy arithmetic flushes as TensorFlow's
  optim.py    Optimizer: the configured rule and learning-rate schedule; optimizer_update
  tflog.py    TensorFlow's start-up chatter kept off the terminal
"""
