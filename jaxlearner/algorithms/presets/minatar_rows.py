"""MinAtar's rows: every MinAtar game in gymnax (``gymnax:*-MinAtar``), PPO and DQN.

Young & Tian 2019 ("MinAtar: An Atari-inspired testbed for thorough and reproducible
reinforcement learning experiments", https://arxiv.org/abs/1903.03176) give DQN's settings
and its network: one 3x3 convolution of 16 filters, stride 1, no padding
(``conv_filters=((16, 3, 1),)``, ``conv_padding="valid"``), then 128 ReLU units. PPO's
settings and network are gymnax-blines' (https://github.com/RobertTLange/gymnax-blines), the
same five files for the five games: separate actor and critic MLPs of 2 x 256 ReLU units on
the flattened 10x10xC grid (``conv_filters=()``). They train from the command line in one
compiled program (``jaxlearner train ppo --env gymnax:Breakout-MinAtar``).
"""

from __future__ import annotations

import functools

from jaxlearner.algorithms.presets.preset import ANY_MINATAR, Preset

_published = functools.partial(Preset, env_id=ANY_MINATAR, origin="published")
"""A :class:`Preset` for every MinAtar game, from a published configuration."""

MINATAR_NETWORK = {
    "conv_filters": ((16, 3, 1),),
    "conv_padding": "valid",
    "hidden_sizes": (128,),
    "activation": "relu",
}
"""MinAtar's network: 16 3x3 filters without padding (10x10 -> 8x8x16), then 128 units."""

BLINES_NETWORK = {
    "conv_filters": (),
    "hidden_sizes": (256, 256),
    "activation": "relu",
    "vf_share_layers": False,
}
"""gymnax-blines' ``Categorical-MLP`` with ``flatten_3d``: the grid flattened, 2 x 256 ReLU
units for the actor and for the critic apart."""

ROWS: tuple[Preset, ...] = (
    _published(
        algorithm="ppo",
        config={
            **BLINES_NETWORK,
            "train_batch_size": 64 * 128,
            "minibatch_size": 1024,
            "num_epochs": 4,
            "lr": 5e-4,
            "adam_epsilon": 1e-5,
            "gamma": 0.999,
            "lambda_": 0.95,
            "clip_param": 0.2,
            "vf_clip_param": 1e10,
            "use_kl_loss": False,
            "entropy_coeff": 0.01,
            "vf_loss_coeff": 0.5,
            "grad_clip": 0.5,
            "normalize_advantages": "minibatch",
        },
        num_envs=64,
        max_steps=10_000_000,
        eval_every=163_840,
        source="gymnax-blines/agents/<game>-MinAtar/ppo.yaml",
        notes="gymnax-blines' 64 envs x 128 steps, 8 minibatches, 4 epochs, lr 5e-4 (its "
        "warm-up ends where it starts), gamma 0.999, GAE 0.95, clip 0.2, entropy 0.01, value "
        "0.5, grad norm 0.5, 10M steps, and its network: separate 2x256 ReLU MLPs on the "
        "flattened grid (MinAtar's CNN plateaued near 6 on Breakout where this reached 11 at "
        "1M steps).",
    ),
    _published(
        algorithm="dqn",
        config={
            **MINATAR_NETWORK,
            "lr": 2.5e-4,
            "train_batch_size": 32,
            "replay_buffer_capacity": 100_000,
            "num_steps_sampled_before_learning_starts": 5000,
            "rollout_fragment_length": 1,
            "target_network_update_freq": 1000,
            "epsilon": ((0, 1.0), (5000, 1.0), (105_000, 0.1)),
            "gamma": 0.99,
            "double_q": False,
            "dueling": False,
            "n_step": 1,
            "grad_clip": None,
            "td_error_loss_fn": "huber",
        },
        num_envs=1,
        max_steps=5_000_000,
        eval_every=100_000,
        source="MinAtar/examples/dqn.py (Young & Tian 2019)",
        notes="MinAtar's batch 32, buffer 100k, one update per frame from 5k frames, a target "
        "copy every 1k, epsilon 1 -> 0.1 over the 100k frames after the warm-up, gamma 0.99, "
        "Huber loss, 5M frames, lr 2.5e-4; Adam for its centered RMSProp (momentum 0.95, "
        "min squared gradient 0.01).",
    ),
)
"""PPO and DQN on every MinAtar game."""
