"""Trajectories: what is computed along a rollout's time axis.

:mod:`~jaxlearner.algorithms.trajectories.returns` holds the return and advantage math
(GAE, n-step returns, V-trace) as small pure functions over ``[T, B]`` arrays;
:mod:`~.sequences` cuts rollouts into zero-padded ``[max_seq_len]`` sequences for
recurrent models.
"""
