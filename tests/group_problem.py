"""The two-module problem shared by the group tests and the multi-host worker."""

import flax.linen as nn
import optax
from helpers import ActorCritic, actor_critic_loss, mse_loss, regression_batch

import jaxlearner as jl

UPDATES = 3


def make_learner(**kwargs):
    """Two modules: one with Adam and clipping, one with two named optimizers."""
    return jl.Learner(
        {
            "policy": jl.ModuleSpec(
                nn.Dense(1), mse_loss, jl.Optimizer(optax.adam, learning_rate=1e-2, grad_clip=1.0)
            ),
            "ac": jl.ModuleSpec(
                ActorCritic(),
                actor_critic_loss,
                optimizers={"actor": optax.adam(1e-2), "critic": optax.sgd(0.05, momentum=0.9)},
            ),
        },
        minibatch_size=16,
        num_epochs=2,
        **kwargs,
    )


def global_batch():
    """64 rows for each module."""
    return {"policy": regression_batch(64, seed=0), "ac": regression_batch(64, seed=1)}
