"""Objectives: loss pieces that an algorithm module builds on, shared or grown large.

:mod:`~jaxlearner.algorithms.objectives.ppo_objective` holds PPO's clipped surrogate and
explained variance (PPO's and APPO's losses use both); :mod:`~.sac_loss` holds SAC's
per-optimizer loss (critics, actor, temperature). Each cites its paper.
"""
