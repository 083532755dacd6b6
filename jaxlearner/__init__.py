"""jaxlearner: a functional, multi-module reinforcement-learning learner for JAX.

RLlib's ``Learner`` features (several modules, named optimizers, schedules,
gradient clipping, minibatch epochs, target-network and KL-coefficient updates,
add/remove module, modules to train) as an immutable pytree state and one
pure, jitted ``update(state, batch) -> (state, metrics)``.

Example:
  >>> import jax, optax, jaxlearner as jl
  >>> spec = jl.ModuleSpec(model, loss, optax.adam(3e-4))              # doctest: +SKIP
  >>> learner = jl.Learner({"policy": spec}, minibatch_size=128, num_epochs=30,
  ...                      sample_batch=sample_batch)                     # doctest: +SKIP
  >>> state = learner.init(jax.random.key(0))                          # doctest: +SKIP
  >>> state, metrics = learner.update(state, batch)                    # doctest: +SKIP
"""

import importlib
from typing import TYPE_CHECKING

from jaxlearner.core import distributed
from jaxlearner.core.additional_updates import (
    AdditionalUpdate,
    adaptive_kl_coeff,
    periodic_copy,
    polyak_update,
    target_update,
)
from jaxlearner.core.context import LossContext
from jaxlearner.core.gradient_postprocess import GradientContext, GradientPostprocess
from jaxlearner.core.gradients import GradientStages, make_gradient_stages
from jaxlearner.core.group import LearnerGroup
from jaxlearner.core.hyperparams import with_hyperparams
from jaxlearner.core.learner import Learner
from jaxlearner.core.learner_config import LearnerConfig
from jaxlearner.core.metrics import ALL_MODULES
from jaxlearner.core.module_spec import ModuleSpec
from jaxlearner.core.observers import Observer, make_observe
from jaxlearner.core.optimizer import DEFAULT_OPTIMIZER, Optimizer
from jaxlearner.core.optimizer_params import params_for_optimizer
from jaxlearner.core.placement import Placement
from jaxlearner.core.registry import (
    learner_from_recipe,
    register_recipe,
    register_recipe_loader,
    registered_recipes,
)
from jaxlearner.core.schedules import Schedule, piecewise_schedule
from jaxlearner.core.shared_optimizer import SharedOptimizer
from jaxlearner.core.state import LearnerState, ModuleState
from jaxlearner.core.update import make_update
from jaxlearner.core.update_queue import UpdateQueue
from jaxlearner.errors import NonFiniteError
from jaxlearner.training.stop_conditions import (
    All,
    AllOf,
    Any,
    AnyOf,
    MaxEnvSteps,
    MaxIterations,
    MaxWallTime,
    Plateau,
    RewardBound,
    StopCondition,
    StopsDecreasing,
    StopsIncreasing,
)

UpdateConfig = LearnerConfig
"""The old name of :class:`LearnerConfig` (one config now serves the learner and its update)."""

if TYPE_CHECKING:
    from jaxlearner import algorithms, anakin
    from jaxlearner.algorithms.replay import replay_buffer
    from jaxlearner.anakin import envs, rollouts, sweeps
    from jaxlearner.checkpoint import (
        CheckpointCorruptedError,
        CheckpointManager,
        CheckpointOptions,
        restore,
    )
    from jaxlearner.training.atari import make_atari
    from jaxlearner.training.custom_algorithm import custom_algorithm
    from jaxlearner.training.driver import Driver
    from jaxlearner.training.env_runners import EnvRunnersConfig
    from jaxlearner.training.multi_agent.trainer import MultiAgentTrainer
    from jaxlearner.training.offline.datasets import (
        Dataset,
        load_dataset,
        record_episodes,
        save_dataset,
    )
    from jaxlearner.training.offline.minari_datasets import load_minari
    from jaxlearner.training.offline.trainer import OfflineTrainer
    from jaxlearner.training.outputs import loggers, plotting, statistics, video
    from jaxlearner.training.outputs.wandb_writer import WandbWriter
    from jaxlearner.training.trainer import Trainer

# The learner core imports neither orbax nor gymnasium; these load on first use.
_LAZY = {
    "CheckpointCorruptedError": "jaxlearner.checkpoint",
    "CheckpointManager": "jaxlearner.checkpoint",
    "CheckpointOptions": "jaxlearner.checkpoint",
    "restore": "jaxlearner.checkpoint",
    "Trainer": "jaxlearner.training.trainer",
    "Driver": "jaxlearner.training.driver",
    "EnvRunnersConfig": "jaxlearner.training.env_runners",
    "custom_algorithm": "jaxlearner.training.custom_algorithm",
    "MultiAgentTrainer": "jaxlearner.training.multi_agent.trainer",  # needs the pettingzoo extra
    "OfflineTrainer": "jaxlearner.training.offline.trainer",
    "Dataset": "jaxlearner.training.offline.datasets",
    "load_dataset": "jaxlearner.training.offline.datasets",
    "save_dataset": "jaxlearner.training.offline.datasets",
    "record_episodes": "jaxlearner.training.offline.datasets",
    "load_minari": "jaxlearner.training.offline.minari_datasets",
    "make_atari": "jaxlearner.training.atari",  # needs the atari extra
    "WandbWriter": "jaxlearner.training.outputs.wandb_writer",
}
# Sub-modules reachable as jl.NAME, loaded on first use.
_LAZY_MODULES = {
    "algorithms": "jaxlearner.algorithms",
    "anakin": "jaxlearner.anakin",
    "envs": "jaxlearner.anakin.envs",
    "rollouts": "jaxlearner.anakin.rollouts",
    "sweeps": "jaxlearner.anakin.sweeps",
    "replay_buffer": "jaxlearner.algorithms.replay.replay_buffer",
    "loggers": "jaxlearner.training.outputs.loggers",
    "plotting": "jaxlearner.training.outputs.plotting",
    "statistics": "jaxlearner.training.outputs.statistics",
    "video": "jaxlearner.training.outputs.video",
}


def _load_builtin_algorithms() -> None:
    """Registers the built-in algorithms (they register themselves when imported).

    The core's registry imports no algorithm (the layers import downward only),
    and importing the algorithms brings gymnasium, which ``import jaxlearner``
    leaves out. So the root package, which sees every layer, hands the registry
    this loader: the first ``jl.learner_from_recipe``, ``jl.restore`` or
    ``jl.registered_recipes`` that needs a name it lacks imports them, whichever
    module (the checkpoint layer, a trainer) made the call.
    """
    import jaxlearner.algorithms  # noqa: F401


register_recipe_loader(_load_builtin_algorithms)


def __getattr__(name: str) -> object:
    if name in _LAZY_MODULES:
        return importlib.import_module(_LAZY_MODULES[name])
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'jaxlearner' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


__version__ = "0.2.0.dev0"
"""The version of this jaxlearner release, as PEP 440 writes it."""

__all__ = [
    "ALL_MODULES",
    "DEFAULT_OPTIMIZER",
    "AdditionalUpdate",
    "All",
    "AllOf",
    "Any",
    "AnyOf",
    "CheckpointCorruptedError",
    "CheckpointManager",
    "CheckpointOptions",
    "Dataset",
    "Driver",
    "EnvRunnersConfig",
    "GradientContext",
    "GradientPostprocess",
    "GradientStages",
    "Learner",
    "LearnerConfig",
    "LearnerGroup",
    "LearnerState",
    "LossContext",
    "MaxEnvSteps",
    "MaxIterations",
    "MaxWallTime",
    "ModuleSpec",
    "ModuleState",
    "MultiAgentTrainer",
    "NonFiniteError",
    "Observer",
    "OfflineTrainer",
    "Optimizer",
    "Placement",
    "Plateau",
    "RewardBound",
    "Schedule",
    "SharedOptimizer",
    "StopCondition",
    "StopsDecreasing",
    "StopsIncreasing",
    "Trainer",
    "UpdateConfig",
    "UpdateQueue",
    "WandbWriter",
    "__version__",
    "adaptive_kl_coeff",
    "algorithms",
    "anakin",
    "custom_algorithm",
    "distributed",
    "envs",
    "learner_from_recipe",
    "load_dataset",
    "load_minari",
    "loggers",
    "make_atari",
    "make_gradient_stages",
    "make_observe",
    "make_update",
    "params_for_optimizer",
    "periodic_copy",
    "piecewise_schedule",
    "plotting",
    "polyak_update",
    "record_episodes",
    "register_recipe",
    "registered_recipes",
    "replay_buffer",
    "restore",
    "rollouts",
    "save_dataset",
    "statistics",
    "sweeps",
    "target_update",
    "video",
    "with_hyperparams",
]
