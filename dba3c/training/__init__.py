"""One node's trainer and a run's records, shared by every mode.

  worker.py      Worker: an actor thread (simulators, batched prediction) feeding the trainer
                 loop (gradient, push to the parameter store, load the next parameters)
  report.py      WorkerReport: the one schema of a worker's counters, losses and seconds
  chief.py       Chief: owns the run directory; logs, checkpoints, evaluations, stopping
  checkpoint.py  the checkpoint format, written atomically; where a run starts
  rundir.py      the run and sweep directories' files, readers and atomic writers
  metrics.py     progress output, metrics.jsonl, TensorBoard, Weights & Biases
  faults.py      fault injection for tests (debug.* keys)
  profiling.py   per-section timings of the actor and trainer loops
"""
