"""PQN's rows: purejaxql's configurations (https://github.com/mttga/purejaxql,
``purejaxql/config/alg/``), typed in under PQN's field names.

purejaxql counts its schedules in updates: the learning rate falls linearly to 0 over
``TOTAL_TIMESTEPS_DECAY`` env steps (``LR_LINEAR_DECAY``), epsilon from ``EPS_START`` to
``EPS_FINISH`` over the fraction ``EPS_DECAY`` of them; here both are piecewise schedules over
env steps to the same points. Its evaluation runs every 5% of the updates (``TEST_INTERVAL``).
"""

from __future__ import annotations

import functools

from jaxlearner.algorithms.presets.preset import ANY_MINATAR, Preset

_published = functools.partial(Preset, algorithm="pqn", origin="published")

ROWS: tuple[Preset, ...] = (
    _published(
        env_id="CartPole-v1",
        config={
            "train_batch_size": 32 * 64,
            "minibatch_size": 32 * 64 // 16,
            "num_epochs": 4,
            "lr": ((0, 1e-4), (500_000, 0.0)),
            "epsilon": ((0, 1.0), (100_000, 0.2)),
            "reward_scale": 0.1,
            "gamma": 0.99,
            "lambda_": 0.95,
            "hidden_sizes": (256, 256),
            "layer_norm": True,
            "grad_clip": 10.0,
        },
        num_envs=32,
        max_steps=500_000,
        eval_every=24_576,
        source="purejaxql/config/alg/pqn_cartpole.yaml",
        notes="purejaxql's 32 envs x 64 steps, 16 minibatches, 4 epochs, RAdam at 1e-4 "
        "falling to 0 over 500k steps, epsilon 1 -> 0.2 over the first 20%, rewards x 0.1, "
        "gamma 0.99, lambda 0.95, 2 x 256 LayerNorm ReLU layers, grad norm 10.",
    ),
    _published(
        env_id=ANY_MINATAR,
        config={
            "train_batch_size": 128 * 32,
            "minibatch_size": 128 * 32 // 32,
            "num_epochs": 2,
            "lr": ((0, 5e-4), (10_000_000, 0.0)),
            "epsilon": ((0, 1.0), (1_000_000, 0.05)),
            "gamma": 0.99,
            "lambda_": 0.65,
            "conv_filters": ((16, 3, 1),),
            "conv_padding": "valid",
            "hidden_sizes": (128,),
            "layer_norm": True,
            "grad_clip": 10.0,
        },
        num_envs=128,
        max_steps=10_000_000,
        eval_every=499_712,
        source="purejaxql/config/alg/pqn_minatar.yaml",
        notes="purejaxql's 128 envs x 32 steps, 32 minibatches, 2 epochs, RAdam at 5e-4 "
        "falling to 0 over 10M steps, epsilon 1 -> 0.05 over the first 10%, gamma 0.99, "
        "lambda 0.65, and its network: 16 3x3 filters without padding, then 128 units, a "
        "LayerNorm before each ReLU. purejaxql also divides MinAtar's 0/1 grid by 255; here it "
        "goes in as it is.",
    ),
)
"""PQN on CartPole and on every MinAtar game."""
