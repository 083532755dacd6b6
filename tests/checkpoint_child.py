"""A training process that saves every update until it is killed (for the crash-safety test).

Run as ``python tests/checkpoint_child.py DIRECTORY``. It resumes from the
latest complete step in ``DIRECTORY`` (or starts fresh), then updates and
saves step after step, forever. The state carries a few megabytes of
incompressible ballast so that each save takes long enough to be killed in
the middle. The test replays the same updates in-process: the state saved as
step ``k`` is the state after ``k`` updates from ``init``.
"""

from __future__ import annotations

import itertools
import sys

import flax.linen as nn
import jax
import numpy as np
import optax

from jaxlearner.checkpoint.manager import CheckpointManager
from jaxlearner.core.learner import Learner
from jaxlearner.core.module_spec import ModuleSpec

BALLAST = 2**21  # float32s: 8 MiB per save


def mse_loss(params, batch, ctx):
    prediction = ctx.apply(params, batch["x"])[:, 0]
    mse = ((prediction - batch["y"]) ** 2).mean()
    return mse, {"mse": mse}


def make_learner() -> Learner:
    """A one-module learner whose extra state is ``BALLAST`` random float32s."""

    def ballast(params):
        return {"ballast": np.random.default_rng(0).random(BALLAST, dtype=np.float32)}

    spec = ModuleSpec(nn.Dense(1), mse_loss, optax.adam(1e-2), init_extra=ballast)
    return Learner({"policy": spec}, minibatch_size=16, num_epochs=2, sample_batch=batch_for(0))


def batch_for(step: int) -> dict[str, np.ndarray]:
    """The deterministic batch of update ``step`` (``0`` is the sample batch for init)."""
    rng = np.random.default_rng(step)
    x = rng.normal(size=(64, 3)).astype(np.float32)
    return {"x": x, "y": (x @ np.asarray([1.0, 2.0, 3.0], np.float32)).astype(np.float32)}


def state_after(learner: Learner, updates: int):
    """The state after ``updates`` updates from init, as the child computes it."""
    state = learner.init(jax.random.key(0), batch_for(0))
    for step in range(1, updates + 1):
        state, _ = learner.update(state, batch_for(step))
    return state


def main(directory: str) -> None:
    learner = make_learner()
    ckpt = CheckpointManager(directory, max_to_keep=3)
    start = ckpt.latest_step() or 0
    state = ckpt.restore(learner) if start else learner.init(jax.random.key(0), batch_for(0))
    for step in itertools.count(start + 1):
        state, _ = learner.update(state, batch_for(step))
        ckpt.save(step, state, learner)
        print(f"saving {step}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
