"""The simulators and what is played on them.

  envs.py        ALE (ale-py's vector environment) and gymnasium simulators; ScoreTracker
  scores.py      human and random reference scores, highest scores, score statistics
  evaluation.py  greedy evaluation (the paper's protocol) and the background evaluator
  schedule.py    EvalSchedule: which global steps are evaluated (no TensorFlow)
  video.py       gameplay video of an evaluation
"""
