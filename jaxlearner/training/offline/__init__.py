"""Offline data: recorded episodes, local Minari datasets, and training on them.

:mod:`~jaxlearner.training.offline.datasets` (the episodes format: record, save, load, check
spaces), :mod:`~.minari_datasets` (local Minari datasets), :mod:`~.record`
(``jaxlearner record`` and ``--dataset``) and :mod:`~.trainer` (``jl.OfflineTrainer``).
"""
