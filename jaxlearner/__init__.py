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

from jaxlearner import distributed
from jaxlearner.additional_updates import (
    AdditionalUpdate,
    adaptive_kl_coeff,
    periodic_copy,
    polyak_update,
)
from jaxlearner.context import LossContext
from jaxlearner.group import LearnerGroup
from jaxlearner.hyperparams import with_hyperparams
from jaxlearner.learner import Learner
from jaxlearner.learner_config import LearnerConfig
from jaxlearner.metrics import ALL_MODULES
from jaxlearner.module_spec import ModuleSpec
from jaxlearner.optimizer import DEFAULT_OPTIMIZER, Optimizer
from jaxlearner.placement import Placement
from jaxlearner.registry import learner_from_recipe, register_recipe, registered_recipes
from jaxlearner.schedules import Schedule, piecewise_schedule
from jaxlearner.state import LearnerState, ModuleState
from jaxlearner.stop_conditions import (
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
from jaxlearner.update import make_update

UpdateConfig = LearnerConfig
"""The old name of :class:`LearnerConfig` (one config now serves the learner and its update)."""

if TYPE_CHECKING:
    from jaxlearner import (
        algorithms,
        anakin,
        envs,
        loggers,
        plotting,
        replay_buffer,
        rollouts,
        sweeps,
        video,
    )
    from jaxlearner.checkpoint import (
        CheckpointCorruptedError,
        CheckpointManager,
        CheckpointOptions,
        restore,
    )
    from jaxlearner.trainer import Trainer

# The learner core imports neither orbax nor gymnasium; these load on first use.
_LAZY = {
    "CheckpointCorruptedError": "jaxlearner.checkpoint",
    "CheckpointManager": "jaxlearner.checkpoint",
    "CheckpointOptions": "jaxlearner.checkpoint",
    "restore": "jaxlearner.checkpoint",
    "Trainer": "jaxlearner.trainer",
    "algorithms": None,
    "anakin": None,
    "envs": None,
    "loggers": None,
    "plotting": None,
    "replay_buffer": None,
    "rollouts": None,
    "sweeps": None,
    "video": None,
}


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'jaxlearner' has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name] or f"jaxlearner.{name}")
    return module if _LAZY[name] is None else getattr(module, name)


def __dir__() -> list[str]:
    return sorted(__all__)


__version__ = "0.2.0.dev0"

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
    "Optimizer",
    "Placement",
    "Plateau",
    "RewardBound",
    "Schedule",
    "StopCondition",
    "StopsDecreasing",
    "StopsIncreasing",
    "Trainer",
    "UpdateConfig",
    "__version__",
    "adaptive_kl_coeff",
    "algorithms",
    "anakin",
    "distributed",
    "envs",
    "learner_from_recipe",
    "loggers",
    "make_update",
    "periodic_copy",
    "piecewise_schedule",
    "plotting",
    "polyak_update",
    "register_recipe",
    "registered_recipes",
    "replay_buffer",
    "restore",
    "rollouts",
    "sweeps",
    "video",
    "with_hyperparams",
]
