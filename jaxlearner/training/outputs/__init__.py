"""What a run gives a person: metric writers, learning curves and videos.

:mod:`~jaxlearner.training.outputs.loggers` (console, JSON lines, TensorBoard, MLflow, the
progress bar), :mod:`~.plotting` (curves from ``metrics.jsonl``) and :mod:`~.video`
(an episode as GIF or MP4).
"""
