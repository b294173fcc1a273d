"""Tuning: the search loop of one workload and of a whole model.

- :mod:`.tune`: ``tune``, the loop over one task's ``TaskTuner`` (``tuner.task``) with its
  stopping rules, progress reports, re-timing of the leaders and NumPy baseline;
- :mod:`.tune_model`: ``tune_model``, every task of an ONNX model under one trial budget;
- :mod:`.scheduler`: which task gets the next trials (gradient, round-robin, replay);
- :mod:`.shared_model`: one cost model that every task of a run teaches.
"""
