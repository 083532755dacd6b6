"""Per-environment presets: tuned settings for an algorithm on an environment, with their source.

:func:`preset` returns an algorithm's typed config and its training settings (envs, budget,
evaluation cadence) for one environment; :func:`preset_names` lists the pairs there are;
``jaxlearner presets`` prints the table, and ``jaxlearner train ALGO --env ENV`` uses the row.
Most rows are RL Zoo's (``rl_zoo3/hyperparams/{ppo,sac,dqn}.yml``, rl_zoo3 2.9), typed in as
the zoo writes them (:mod:`.ppo_rows`, :mod:`.sac_rows`, :mod:`.dqn_rows`) and translated by
:func:`.sb3.zoo_row`; a few are tuned here (:mod:`.tuned_rows`). Every row names its source
file and entry. The zoo lists MuJoCo ``-v4`` (some ``-v2``) ids; the rows use gymnasium's
``-v5`` ids for the same tasks.

RL Zoo's settings assume SB3's conventions. The translation, once:

=====================================  =============================================================
SB3 / RL Zoo                           jaxlearner
=====================================  =============================================================
``n_envs``                             the row's ``num_envs`` (sub-environments stepped together)
``n_timesteps``                        the row's ``max_steps`` (the budget; ``lin_`` schedules end
                                       there; ``-n`` is ``--max-steps``, which stretches them:
                                       :meth:`Preset.with_budget`)
``n_steps`` (per env)                  PPO: ``train_batch_size = n_steps * n_envs``
``batch_size``                         PPO: ``minibatch_size`` (at most the rollout, as SB3 takes
                                       it); SAC, DQN: ``train_batch_size`` (rows per update)
``n_epochs``                           PPO: ``num_epochs``
``learning_rate``                      PPO, DQN: ``lr``; SAC: ``actor_lr``, ``critic_lr`` and
                                       ``alpha_lr`` (SB3 uses one rate for all three)
(PPO's Adam, always)                   PPO: ``adam_epsilon = 1e-5`` (SB3's ``ActorCriticPolicy``
                                       gives Adam ``eps=1e-5``; PyTorch's and our default is 1e-8)
``lin_X``                              ``((0, X), (n_timesteps, 0))``: a piecewise schedule from X
                                       to 0 over env steps, SB3's ``X * progress_remaining``
``gamma``                              ``gamma``
``gae_lambda``                         PPO: ``lambda_``
``clip_range``                         PPO: ``clip_param`` (a constant or ``lin_`` schedule)
``clip_range_vf=None``                 PPO: ``vf_clip_param=1e10`` (ours clips the squared error)
``normalize_advantage``                PPO: ``normalize_advantages="minibatch"`` (SB3 standardizes
                                       each minibatch's advantages, unbiased std; ``False`` as
                                       written)
(no KL penalty)                        PPO: ``use_kl_loss=False``
``ent_coef``                           PPO: ``entropy_coeff``; SAC: ``'auto'`` learns the
                                       temperature from ``initial_alpha=1`` (``'auto_X'``: from X)
                                       toward ``target_entropy="auto"`` (``-dim(A)``, as SB3); a
                                       number is a fixed temperature: ``initial_alpha``,
                                       ``alpha_lr=0``
``vf_coef``                            PPO: ``vf_loss_coeff`` (both weigh the unhalved squared
                                       error)
``max_grad_norm``                      ``grad_clip`` (by global norm)
``policy_kwargs``: ``net_arch``        ``hidden_sizes`` (``dict(pi=..., vf=...)``: equal sizes,
                                       separate networks: ``vf_share_layers=False``)
``activation_fn``                      ``activation`` (``nn.ReLU`` is ``"relu"``)
``log_std_init``                       PPO: ``log_std_init`` (state-independent log-std)
``ortho_init``                         PPO: ``ortho_init`` (False: PyTorch's default init)
``normalize: true``                    ``norm_obs=True, norm_reward=True`` (``VecNormalize``, clip
                                       10, its ``gamma`` the row's), and ``num_envs_per_env_runner =
                                       n_envs``; ``"{'norm_obs': True, 'norm_reward': False}"`` as
                                       written
``learning_starts``                    ``num_steps_sampled_before_learning_starts`` (env steps);
                                       SAC: ``warmup_actions="uniform"`` (SB3 acts uniformly at
                                       random until then; SB3's DQN too, where our epsilon starts
                                       at 1)
``buffer_size``                        ``replay_buffer_capacity``
``tau``                                ``tau``
``train_freq`` / ``gradient_steps``    ``rollout_fragment_length = train_freq``;
                                       ``training_intensity = gradient_steps / (train_freq * n_envs)
                                       * batch_size`` (rows trained per env step; ``None`` at one
                                       update per env step; ``gradient_steps=-1`` is one per env
                                       step)
``target_update_interval``             DQN: ``target_network_update_freq`` (env steps), ``tau=1``
``exploration_fraction``, ``_final``   DQN: ``epsilon = ((0, 1.0), (fraction * n_timesteps,
                                       final))``
(SB3's DQN, SAC)                       DQN: ``double_q=False, dueling=False``, Huber loss; SAC:
                                       ``td_error_loss_fn="mse"``, twin critics
``use_sde``, ``sde_sample_freq``,      not supported here: left out, and the row's notes say so
``use_expln``
``atari`` (``AtariWrapper``,           the ``ALE/*`` rows, for every ``ALE/`` id: gymnasium's
``frame_stack: 4``)                    ``AtariPreprocessing`` and ``FrameStackObservation`` on ALE
                                       v5 (:mod:`jaxlearner.training.atari`; v5 keeps sticky
                                       actions, the zoo's NoFrameskip-v4 has none)
``policy: CnnPolicy``                  SB3's ``NatureCNN``: ``conv_padding="valid"``,
                                       ``hidden_sizes=(512,)``, linear heads; PPO:
                                       ``vf_share_layers=True`` (one shared feature extractor)
``optimize_memory_usage: False``       DQN: ``replay_frame_stack=4`` (each frame kept twice, not
                                       the 8 times SB3's buffer keeps it; same transitions)
=====================================  =============================================================

Evaluation: RL Zoo evaluates every 25,000 env steps (``rl_zoo3/train.py``'s ``--eval-freq``);
rows with smaller budgets evaluate 20 times. Known differences that remain: SB3's PPO
evaluates a ``lin_`` schedule after collecting the rollout (ours before, one batch earlier);
``VecNormalize`` updates its statistics at every env step and normalizes each observation with
them, where ours update once per collected batch and a rollout acts with the statistics of the
batches before it; SB3's SAC clamps its log-std to ``[-20, 2]`` (ours squashes it into ``[-5, 2]``;
``SACConfig(log_std_bound="clip", log_std_range=(-20, 2))`` is SB3's); SB3's SAC networks use
PyTorch's default initialisation (ours orthogonal; ``SACConfig(ortho_init=False)`` is SB3's).
The SAC rows keep ours: with SB3's two on Hopper-v5 (50k env steps, seeds 0-2) the final
returns were 287 / 318 / 280 against 359 / 272 / 272 (``benchmarks/README.md``). SB3's DQN
networks use PyTorch's initialisation too (``DQNConfig(ortho_init=False)``); the DQN rows keep
ours: with SB3's, by the preset matrix's command (seeds 0-2), CartPole ended 500 / 112.9 / 500
(ours 450.7 / 132.5 / 16.4) but MountainCar -127.3 / -121.8 / -149.9 (ours -114.5 / -159.7 /
-105.8) and Acrobot -86.9 / -93.9 (two seeds; ours -72.9 / -75.0 / -70.5).
"""

from jaxlearner.algorithms.presets.preset import ORIGINS, Origin, Preset
from jaxlearner.algorithms.presets.table import (
    PRESETS,
    preset,
    preset_names,
    preset_row,
    preset_rows,
)

__all__ = [
    "ORIGINS",
    "PRESETS",
    "Origin",
    "Preset",
    "preset",
    "preset_names",
    "preset_row",
    "preset_rows",
]
