"""Anakin: rollouts and updates in one compiled call over pure-JAX environments.

:mod:`~jaxlearner.anakin.envs` holds the environments (CartPole-v1, Pendulum-v1, gymnax),
:mod:`~jaxlearner.anakin.rollouts` the compiled rollouts, :mod:`~jaxlearner.anakin.iteration`
one training iteration (rollout, observers, learning), :mod:`~jaxlearner.anakin.train`
the training loop re-exported here, and :mod:`~jaxlearner.anakin.sweeps` vmaps it over
seeds and hyperparameters.

Example:
  >>> from jaxlearner import anakin
  >>> config = anakin.AnakinConfig(num_envs=16, num_iterations=200)  # doctest: +SKIP
"""

from jaxlearner.anakin.iteration import AnakinState, Buffer, LearnFn, Metrics
from jaxlearner.anakin.train import (
    Anakin,
    AnakinConfig,
    Hyperparams,
    InitFn,
    RunFn,
    TrainFn,
    make_anakin,
    make_train,
    one_agent_at_a_time,
)
from jaxlearner.anakin.trainer import AnakinCounters, AnakinEngine, AnakinTrainer

__all__ = [
    "Anakin",
    "AnakinConfig",
    "AnakinCounters",
    "AnakinEngine",
    "AnakinState",
    "AnakinTrainer",
    "Buffer",
    "Hyperparams",
    "InitFn",
    "LearnFn",
    "Metrics",
    "RunFn",
    "TrainFn",
    "make_anakin",
    "make_train",
    "one_agent_at_a_time",
]
