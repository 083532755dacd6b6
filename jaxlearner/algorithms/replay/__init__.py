"""Replay: device replay buffers and the compiled off-policy update loop.

:mod:`~jaxlearner.algorithms.replay.replay_buffer` (uniform) and
:mod:`~.prioritized_replay` (proportional, Schaul et al. 2016) hold transitions on the
device; :mod:`~.off_policy` turns rollouts into (n-step) transitions, decides how many
updates are due, and samples and updates in one compiled loop, for the
:func:`~jaxlearner.Trainer` and :mod:`jaxlearner.anakin` alike, and builds DQN's and
SAC's algorithm; :mod:`~.off_policy_config` checks the config fields they share.
"""
