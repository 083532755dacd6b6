"""Several agents: PettingZoo parallel environments trained with one multi-module learner.

:mod:`~jaxlearner.training.multi_agent.env` (PettingZoo envs, ``GridSpread``),
:mod:`~.policy_mapping` (agents to policies, checked), :mod:`~.runner` (rollouts of env
copies, one batch per policy), :mod:`~.stats` (counters, per-agent and per-policy episode
statistics) and :mod:`~.trainer` (``jl.MultiAgentTrainer``).
"""
