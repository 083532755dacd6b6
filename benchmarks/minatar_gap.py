"""Where our Breakout-MinAtar PPO and the fused reference part ways (issue 25): swap one piece.

Run: ``python benchmarks/minatar_gap.py VARIANT [VARIANT ...] [--steps 2097152] [--seed 0]``.

Every variant trains gymnax's Breakout-MinAtar at the MinAtar preset's shapes (64 envs x 128
steps, 4 epochs of 8 minibatches, lr 5e-4, gamma 0.999) and prints the mean training return
at each eighth of the run (the episodes that ended in the 8 updates before it):

- ``fused``: ``fused_ppo.MINATAR`` (purejaxrl's loop, gymnax-blines' network, lr annealed to 0
  over ``--steps``);
- ``fused+net``: the same loop with our preset's model (``jl.algorithms.build``'s);
- ``fused+net+loss``: also our PPO objective (``ppo_objective``: unclipped value loss with
  ``vf_loss_coeff`` 0.5, advantages standardized per minibatch) instead of purejaxrl's loss;
- ``fused+loss``: the reference's own network with our PPO objective (one piece: the model
  is the reference's, up to the random draw of its params, benchmarks/README.md);
- ``fused+net+loss+gae``: also our GAE (``trajectories.returns.gae`` as our postprocess calls
  it: bootstrapped at truncations from the final observation's value);
- ``...,const``: any fused variant with a constant learning rate (as the preset's);
- ``...,vf=X``: our objective's ``vf_loss_coeff`` X instead of the preset's 0.5 (the
  reference weighs its halved, clipped squared error by 0.5: 0.25 on the unhalved one);
- ``anakin``: ``jaxlearner.anakin`` with the preset as it is (constant lr);
- ``anakin,anneal``: with the lr annealed to 0 over ``--steps`` (``lr=((0, 5e-4), (steps, 0))``).

Seed 0, 2M steps, 2026-11-27 (2 cores): fused+net+loss 5.8 / 10.8 / 20.3 at 0.26M / 0.52M /
0.79M, but 6.2 / 6.4 / 6.5 (and 6.4 at 2M) with ``,const``; anakin,anneal 5.9 / 6.9 / 6.9 (7.0
at 2M). So the network and the loss are not the gap; the learning rate's schedule matters in
the fused loop, and our pipeline stays on the plateau even with the same schedule.
``fused+net+loss+gae``: 5.9 / 6.9 / 7.0, 7.0 at 2M: with our GAE (bootstrapping at
truncations) the fused loop stays on the plateau too. Seed 1 does not separate them (both
stay at 7.0 to 2M). At 5M (2026-11-27) no episode of any fused variant ended at the time limit
(the printed share is 0.0 throughout), so the GAE variants compute the same advantages and
that lead is void; escaping the plateau is seed-dependent for every variant with one of our
pieces (benchmarks/README.md, "The lead is void"). ``fused+loss`` at 5M: seed 1 escaped by
0.65M and seed 3 by 1.3M, seeds 0 and 2 stayed at 7.0, where the reference with the same
initial params escaped on all four (seed 3 by 2M).
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import fused_ppo

import jaxlearner as jl
from jaxlearner import anakin
from jaxlearner.algorithms.networks.distribution_spec import DistributionSpec
from jaxlearner.algorithms.objectives.ppo_objective import ppo_objective
from jaxlearner.algorithms.trajectories.returns import gae
from jaxlearner.core.context import LossContext

ENV_ID = "gymnax:Breakout-MinAtar"


class PresetNetwork:
    """Our preset's model behind the fused loop's ``init``/``apply``."""

    def __init__(self, model) -> None:
        self.model = model

    def init(self, key, obs):
        return self.model.init(key, obs[None])

    def apply(self, params, obs):
        return self.model.apply(params, obs)


def our_loss(config):
    """Our PPO objective in the fused loop's loss signature."""
    hyperparams = {
        "clip_param": config.clip_param,
        "vf_clip_param": config.vf_clip_param,
        "vf_loss_coeff": config.vf_loss_coeff,
        "entropy_coeff": 0.01,
    }
    ctx = LossContext(
        "default_policy", None, None, {}, {k: jnp.float32(v) for k, v in hyperparams.items()}, {}
    )

    def loss(logits, value, traj, gae, targets):
        batch = {
            "actions": traj["action"],
            "logp": traj["log_prob"],
            "dist_inputs": jax.lax.stop_gradient(logits),  # only the KL metric reads it
            "advantages": gae,
            "value_targets": targets,
            "mask": jnp.ones_like(gae),
        }
        spec = DistributionSpec("categorical", (logits.shape[-1],))
        total, metrics = ppo_objective(
            spec, False, logits, value, batch, ctx, normalize_advantages=True
        )
        return total, (metrics["vf_loss"], metrics["policy_loss"], metrics["entropy"])

    return loss


def our_advantages(network, config):
    """Our PPO postprocess's GAE: bootstrapped from the value of the observation each step
    reached (the final one at a truncation), cut only at terminations."""

    def advantages(params, traj):
        next_values = network.apply(params, traj["final_obs"])[1]
        return gae(
            traj["reward"],
            traj["value"],
            next_values,
            traj["terminated"],
            traj["truncated"],
            config.gamma,
            config.lambda_,
        )

    return advantages


def train_fn(variant: str, steps: int):
    env = anakin.envs.make(ENV_ID)
    config, row = jl.algorithms.preset("ppo", ENV_ID)
    parts = variant.split(",")
    for part in parts:
        if part.startswith("vf="):
            config = dataclasses.replace(config, vf_loss_coeff=float(part[3:]))
    if parts[0] == "anakin":
        if "anneal" in parts:
            config = dataclasses.replace(config, lr=((0, config.lr), (steps, 0.0)))
        algorithm = jl.algorithms.build("ppo", env.observation_space, env.action_space, config)
        iterations = steps // (row.num_envs * 128)
        setup = anakin.AnakinConfig(
            num_envs=row.num_envs, num_iterations=iterations, evaluate=False
        )
        return anakin.make_train(algorithm, anakin.envs.make(ENV_ID), setup)
    reference = dataclasses.replace(
        fused_ppo.MINATAR, total_timesteps=steps, anneal_lr="const" not in parts
    )
    algorithm = jl.algorithms.build("ppo", env.observation_space, env.action_space, config)
    model = algorithm.learner.specs["default_policy"].model
    network = PresetNetwork(model) if "net" in parts[0] else None
    loss = our_loss(config) if "+loss" in parts[0] else None
    if "+gae" in parts[0]:
        values = network
        if values is None:  # the reference's own network: the same module make_train builds
            values = fused_ppo.network_for(reference, int(env.action_space.n))
        advantages = our_advantages(values, config)
    else:
        advantages = None
    return fused_ppo.make_train(
        reference, env, network=network, loss=loss, advantages=advantages, track_truncations=True
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("variants", nargs="+")
    parser.add_argument("--steps", type=int, default=2_097_152)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for variant in args.variants:
        start = time.perf_counter()
        _, metrics = jax.jit(train_fn(variant, args.steps))(jax.random.key(args.seed))
        curve = per_eighth(metrics["episode_return_mean"])
        seconds = time.perf_counter() - start
        print(f"{variant}: {[round(x, 2) for x in curve]} ({seconds:.0f} s)", flush=True)
        if "truncated_fraction" in metrics:
            shares = per_eighth(metrics["truncated_fraction"])
            print(f"  time-limit share of ended episodes: {[round(x, 3) for x in shares]}")


def per_eighth(values) -> list[float]:
    """The mean of ``values`` (one per update, NaN where no episode ended) over the 8 updates
    before each eighth of the run."""
    values = np.asarray(values)
    eighth = len(values) // 8
    return [float(np.nanmean(values[max(0, k * eighth - 8) : k * eighth])) for k in range(1, 9)]


if __name__ == "__main__":
    main()
