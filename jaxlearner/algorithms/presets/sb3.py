"""RL Zoo's hyperparameters, in SB3's names and conventions, translated to jaxlearner's fields.

:func:`zoo_row` takes one entry of ``rl_zoo3/hyperparams/{ppo,sac,dqn,td3}.yml`` as the zoo
writes it (SB3's keyword names; ``policy_kwargs`` as a dict, ``activation_fn`` as a name
such as ``"relu"``; entries merged from ``<<: *anchor`` written out) and returns a
:class:`~jaxlearner.algorithms.presets.preset.Preset` whose config holds our fields. The
mapping itself is written down once, in :mod:`jaxlearner.algorithms.presets`; SB3's defaults
(``stable_baselines3`` 2.x, the values a zoo entry leaves out) are the ``*_DEFAULTS`` below.
A key the translation does not know fails at import, so a typo in a row cannot pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jaxlearner.algorithms.presets.preset import Preset

NO_VALUE_CLIP = 1e10
"""``vf_clip_param`` for SB3's ``clip_range_vf=None``: our PPO clips the squared value error
at ``vf_clip_param`` (RLlib's rule); no squared error reaches this."""

SB3_PPO_ADAM_EPSILON = 1e-5
"""Adam's epsilon in SB3's PPO: ``ActorCriticPolicy`` passes ``eps=1e-5`` to Adam unless
``optimizer_kwargs`` say otherwise (PyTorch's default, ours, is 1e-8)."""

ZOO_EVAL_EVERY = 25_000
"""RL Zoo's evaluation cadence in env steps (``rl_zoo3/train.py``'s ``--eval-freq`` default)."""

PPO_DEFAULTS: dict[str, Any] = {
    "learning_rate": 3e-4,
    "n_steps": 2048,
    "batch_size": 64,
    "n_epochs": 10,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "clip_range": 0.2,
    "ent_coef": 0.0,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "normalize_advantage": True,
}
"""SB3 ``PPO``'s defaults; its ``MlpPolicy``: separate 64x64 tanh pi and vf networks,
``ortho_init=True``, ``log_std_init=0``."""

SAC_DEFAULTS: dict[str, Any] = {
    "learning_rate": 3e-4,
    "buffer_size": 1_000_000,
    "learning_starts": 100,
    "batch_size": 256,
    "tau": 0.005,
    "gamma": 0.99,
    "train_freq": 1,
    "gradient_steps": 1,
    "ent_coef": "auto",
}
"""SB3 ``SAC``'s defaults; its ``MlpPolicy``: 256x256 ReLU actor and twin critics."""

TD3_DEFAULTS: dict[str, Any] = {
    "learning_rate": 1e-3,
    "buffer_size": 1_000_000,
    "learning_starts": 100,
    "batch_size": 256,
    "tau": 0.005,
    "gamma": 0.99,
    "train_freq": 1,
    "gradient_steps": 1,
    "policy_delay": 2,
    "target_policy_noise": 0.2,
    "target_noise_clip": 0.5,
    "noise_type": None,
    "noise_std": 0.1,
}
"""SB3 ``TD3``'s defaults (no action noise unless the zoo's ``noise_type`` adds it); its
``MlpPolicy``: 400x300 ReLU actor and twin critics."""

DQN_DEFAULTS: dict[str, Any] = {
    "learning_rate": 1e-4,
    "buffer_size": 1_000_000,
    "learning_starts": 100,
    "batch_size": 32,
    "tau": 1.0,
    "gamma": 0.99,
    "train_freq": 4,
    "gradient_steps": 1,
    "target_update_interval": 10_000,
    "exploration_fraction": 0.1,
    "exploration_initial_eps": 1.0,
    "exploration_final_eps": 0.05,
    "max_grad_norm": 10.0,
}
"""SB3 ``DQN``'s defaults; its ``MlpPolicy``: a 64x64 ReLU Q-network, no double-Q or dueling."""

UNSUPPORTED: dict[str, str] = {
    "use_sde": "gSDE exploration is not supported here",
    "sde_sample_freq": "a gSDE setting",
    "use_sde_at_warmup": "a gSDE setting",
}
"""Zoo keys left out of a row; its notes name each one and why."""

ATARI_WRAPPER = "stable_baselines3.common.atari_wrappers.AtariWrapper"
"""The zoo's Atari preprocessing: what ``jaxlearner.training.atari`` gives every ``ALE/`` id."""

ATARI_NOTES = (
    "RL Zoo trains NoFrameskip-v4 games through SB3's AtariWrapper (no sticky actions); here "
    "ALE v5 games with gymnasium's AtariPreprocessing and v5's sticky actions (0.25), the "
    "same 30 no-op starts, frame skip 4 with max-pooling, 84x84 grayscale and 4 stacked "
    "frames; a life loss ends the episode and rewards are clipped to their sign for learning "
    "only, so episode returns are game scores (jaxlearner.training.atari); FIRE is pressed "
    "after each reset and lost life in games that wait for it, as SB3's FireResetEnv. "
    "CnnPolicy is SB3's NatureCNN: conv_padding 'valid' and a 512-unit layer (hidden_sizes "
    "[512]), linear heads."
)
"""What every Atari row's notes say about the environment and the network."""

POLICY_UNSUPPORTED: dict[str, dict[str, str]] = {
    "ppo": {"use_expln": "a gSDE setting"},
    "sac": {"use_expln": "a gSDE setting", "log_std_init": "SB3's SAC reads it only with gSDE"},
    "dqn": {},
    "td3": {},
}
"""``policy_kwargs`` keys left out of each algorithm's rows, and why."""


def linear_schedule(value: float, budget: int) -> tuple[tuple[int, float], ...]:
    """SB3's ``lin_X``: ``X * progress_remaining``, from ``X`` at env step 0 to 0 at ``budget``.

    A piecewise schedule over the module's ``env_steps`` counter (the env steps trained on,
    which the trainers advance by the steps each batch sampled), so it spans the whole run as
    SB3's progress does.

    Example:
      >>> linear_schedule(1e-3, 100_000)
      ((0, 0.001), (100000, 0.0))
    """
    return ((0, float(value)), (int(budget), 0.0))


def schedule(value: float | str, budget: int) -> float | tuple[tuple[int, float], ...]:
    """A zoo value that may be a schedule: a number, or ``"lin_X"`` (:func:`linear_schedule`).

    Raises:
      ValueError: for another string.
    """
    if isinstance(value, str):
        if not value.startswith("lin_"):
            raise ValueError(f"RL Zoo schedules look like 'lin_3e-4'; got {value!r}.")
        return linear_schedule(float(value.removeprefix("lin_")), budget)
    return float(value)


def zoo_row(
    algorithm: str,
    env_id: str,
    entry: str,
    hyperparams: Mapping[str, Any],
    eval_every: int | None = None,
    notes: str = "",
) -> Preset:
    """The :class:`Preset` for one RL Zoo entry, translated to our config fields.

    Args:
      algorithm: ``"ppo"``, ``"sac"``, ``"dqn"`` or ``"td3"`` (the zoo file ``{algorithm}.yml``).
      env_id: gymnasium's id for the environment (``"HalfCheetah-v5"``).
      entry: the zoo file's entry (``"HalfCheetah-v4"``, or ``"default"``).
      hyperparams: the entry's keys and values as the zoo writes them.
      eval_every: env steps between evaluations; by default RL Zoo's
        :data:`ZOO_EVAL_EVERY`, or 20 evaluations where the budget is smaller.
      notes: what else the row's reader should know (joined with the notes the
        translation adds: unsupported keys, a renamed id, a clamped minibatch).

    Raises:
      ValueError: for a key the translation does not know, or a value it cannot map.

    Example:
      >>> row = zoo_row("sac", "Pendulum-v1", "Pendulum-v1",
      ...               {"n_timesteps": 20000, "learning_rate": 1e-3})
      >>> row.config["critic_lr"], row.max_steps, row.source
      (0.001, 20000, 'rl_zoo3/hyperparams/sac.yml: Pendulum-v1')
    """
    values = dict(hyperparams)
    budget = int(values.pop("n_timesteps"))
    num_envs = int(values.pop("n_envs", 1))
    pixels = _atari_entry(entry, values)
    added = [] if entry in (env_id, "default") else [f"RL Zoo's id {entry}, here {env_id}."]
    if pixels:
        added = [ATARI_NOTES]
    if entry == "default":
        added.append("Not listed in the zoo's file: its default entry, SB3's defaults.")
    for key, why in UNSUPPORTED.items():
        if key in values:
            added.append(f"{key}={values.pop(key)!r} left out: {why}.")
    normalize = _normalization(values.pop("normalize", False), num_envs, algorithm)
    policy = dict(values.pop("policy_kwargs", {}))
    for key, why in POLICY_UNSUPPORTED[algorithm].items():
        if key in policy:
            added.append(f"policy_kwargs {key}={policy.pop(key)!r} left out: {why}.")
    translate = {"ppo": _ppo, "sac": _sac, "dqn": _dqn, "td3": _td3}[algorithm]
    source = f"rl_zoo3/hyperparams/{algorithm}.yml: {entry}"
    try:
        config = translate(values, budget, num_envs, added)
        config.update(_network(policy, algorithm) if not pixels else _nature_cnn(algorithm))
    except ValueError as error:
        raise ValueError(f"{source}: {error}") from None
    config.update(normalize)
    return Preset(
        algorithm=algorithm,
        env_id=env_id,
        config=config,
        num_envs=num_envs,
        max_steps=budget,
        eval_every=eval_every or min(ZOO_EVAL_EVERY, max(budget // 20, 1)),
        source=source,
        notes=" ".join([*added, notes]).strip(),
        origin="rl_zoo3",
    )


def _atari_entry(entry: str, values: dict[str, Any]) -> bool:
    """Whether the entry is the zoo's Atari one (``CnnPolicy`` with the AtariWrapper and 4
    stacked frames); its keys beyond the algorithm's are taken out of ``values``.

    Raises:
      ValueError: for another policy, wrapper or stack.
    """
    policy = values.pop("policy", "MlpPolicy")
    if policy == "MlpPolicy":
        return False
    wrapper, stack = values.pop("env_wrapper", None), values.pop("frame_stack", None)
    if policy != "CnnPolicy" or wrapper != [ATARI_WRAPPER] or stack != 4:
        raise ValueError(
            f"{entry}: only MlpPolicy entries and the Atari entry (CnnPolicy, env_wrapper "
            f"[{ATARI_WRAPPER}], frame_stack 4) translate; got policy {policy!r}, "
            f"env_wrapper {wrapper!r}, frame_stack {stack!r}."
        )
    if values.pop("optimize_memory_usage", False):
        raise ValueError(f"{entry}: optimize_memory_usage=True does not translate.")
    return True


def _nature_cnn(algorithm: str) -> dict[str, Any]:
    """SB3's ``CnnPolicy`` as our network fields: the Nature CNN (its ``NatureCNN``: valid
    convolutions, then 512 ReLU units), linear heads on it, and for PPO one encoder shared by
    the policy and the value (SB3's ``share_features_extractor``); DQN keeps each stacked frame
    once in its buffer (SB3's ``optimize_memory_usage=False`` keeps it 8 times)."""
    fields: dict[str, Any] = {"hidden_sizes": (512,), "activation": "relu", "conv_padding": "valid"}
    if algorithm == "ppo":
        fields.update(vf_share_layers=True, ortho_init=True, log_std_init=0.0)
    if algorithm == "dqn":
        fields["replay_frame_stack"] = 4
    return fields


def _take(values: dict[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(values) - set(defaults))
    if unknown:
        raise ValueError(f"Unknown zoo keys {unknown}; this translation knows {sorted(defaults)}.")
    return {**defaults, **values}


def _ppo(values: dict[str, Any], budget: int, num_envs: int, notes: list[str]) -> dict[str, Any]:
    """PPO's fields: one rollout of ``n_steps`` per env is the train batch; no KL term and no
    value clipping, and advantages standardized per minibatch, as SB3's PPO."""
    zoo = _take(values, PPO_DEFAULTS)
    train_batch_size = int(zoo["n_steps"]) * num_envs
    minibatch_size = min(int(zoo["batch_size"]), train_batch_size)
    if minibatch_size < zoo["batch_size"]:
        notes.append(
            f"batch_size {zoo['batch_size']} exceeds n_steps x n_envs = {train_batch_size}: "
            f"SB3 then takes the whole rollout as one minibatch, so minibatch_size is "
            f"{train_batch_size}."
        )
    return {
        "lr": schedule(zoo["learning_rate"], budget),
        "adam_epsilon": SB3_PPO_ADAM_EPSILON,
        "gamma": float(zoo["gamma"]),
        "lambda_": float(zoo["gae_lambda"]),
        "clip_param": schedule(zoo["clip_range"], budget),
        "vf_clip_param": NO_VALUE_CLIP,
        "vf_loss_coeff": float(zoo["vf_coef"]),
        "entropy_coeff": float(zoo["ent_coef"]),
        "use_kl_loss": False,
        "grad_clip": float(zoo["max_grad_norm"]),
        "train_batch_size": train_batch_size,
        "minibatch_size": minibatch_size,
        "num_epochs": int(zoo["n_epochs"]),
        "normalize_advantages": "minibatch" if zoo["normalize_advantage"] else False,
    }


def _replay(zoo: Mapping[str, Any], num_envs: int) -> dict[str, Any]:
    """The replay fields DQN and SAC share: batch, buffer, warm-up and the replay ratio.

    SB3 collects ``train_freq`` steps of each env (our ``rollout_fragment_length``), then
    takes ``gradient_steps`` updates (-1: one per env step collected); our
    ``training_intensity`` is rows trained on per env step, ``updates per env step x
    train_batch_size`` (``None``: one update per env step).
    """
    train_freq, gradient_steps = zoo["train_freq"], int(zoo["gradient_steps"])
    if isinstance(train_freq, bool) or not isinstance(train_freq, int):
        raise ValueError(f"train_freq must be a number of steps; got {train_freq!r}.")
    collected = train_freq * num_envs
    updates = collected if gradient_steps == -1 else gradient_steps
    per_step = updates / collected
    batch_size = int(zoo["batch_size"])
    return {
        "train_batch_size": batch_size,
        "replay_buffer_capacity": int(zoo["buffer_size"]),
        "num_steps_sampled_before_learning_starts": int(zoo["learning_starts"]),
        "rollout_fragment_length": train_freq,
        "training_intensity": None if per_step == 1 else per_step * batch_size,
    }


def _sac(values: dict[str, Any], budget: int, num_envs: int, notes: list[str]) -> dict[str, Any]:
    """SAC's fields: one learning rate for the actor, critics and temperature, as SB3's."""
    zoo = _take(values, SAC_DEFAULTS)
    lr = schedule(zoo["learning_rate"], budget)
    ent_coef = zoo["ent_coef"]
    alpha: dict[str, Any] = {"initial_alpha": 1.0, "alpha_lr": lr}
    if isinstance(ent_coef, str) and ent_coef.startswith("auto_"):
        alpha["initial_alpha"] = float(ent_coef.removeprefix("auto_"))
    elif ent_coef != "auto":
        alpha = {"initial_alpha": float(ent_coef), "alpha_lr": 0.0}
        notes.append(f"ent_coef={ent_coef} is a fixed temperature: initial_alpha, alpha_lr 0.")
    return {
        "actor_lr": lr,
        "critic_lr": lr,
        **alpha,
        "target_entropy": "auto",
        "gamma": float(zoo["gamma"]),
        "tau": float(zoo["tau"]),
        **_replay(zoo, num_envs),
        "n_step": 1,
        "twin_q": True,
        "td_error_loss_fn": "mse",
        "grad_clip": None,
        "warmup_actions": "uniform",
    }


def _td3(values: dict[str, Any], budget: int, num_envs: int, notes: list[str]) -> dict[str, Any]:
    """TD3's fields: one learning rate for the actor and the critics, as SB3's; the zoo's
    ``noise_type: normal`` is Gaussian exploration noise of std ``noise_std`` on the actions
    scaled to ``[-1, 1]`` (SB3's ``NormalActionNoise`` on its scaled actions)."""
    zoo = _take(values, TD3_DEFAULTS)
    lr = schedule(zoo["learning_rate"], budget)
    noise_type = zoo["noise_type"]
    if noise_type not in (None, "normal"):
        raise ValueError(
            f"noise_type {noise_type!r} does not translate: TD3 here explores with Gaussian "
            "noise (noise_type 'normal') or none."
        )
    return {
        "actor_lr": lr,
        "critic_lr": lr,
        "gamma": float(zoo["gamma"]),
        "tau": float(zoo["tau"]),
        "policy_delay": int(zoo["policy_delay"]),
        "target_noise": float(zoo["target_policy_noise"]),
        "target_noise_clip": float(zoo["target_noise_clip"]),
        "exploration_noise": float(zoo["noise_std"]) if noise_type == "normal" else 0.0,
        **_replay(zoo, num_envs),
        "n_step": 1,
        "td_error_loss_fn": "mse",
        "grad_clip": None,
        "warmup_actions": "uniform",
    }


def _dqn(values: dict[str, Any], budget: int, num_envs: int, notes: list[str]) -> dict[str, Any]:
    """DQN's fields: SB3's DQN has neither double-Q nor dueling; epsilon falls linearly over
    ``exploration_fraction`` of the budget, then holds."""
    zoo = _take(values, DQN_DEFAULTS)
    decay_steps = int(float(zoo["exploration_fraction"]) * budget)
    return {
        "lr": schedule(zoo["learning_rate"], budget),
        "gamma": float(zoo["gamma"]),
        **_replay(zoo, num_envs),
        "target_network_update_freq": int(zoo["target_update_interval"]),
        "tau": float(zoo["tau"]),
        "epsilon": (
            (0, float(zoo["exploration_initial_eps"])),
            (decay_steps, float(zoo["exploration_final_eps"])),
        ),
        "n_step": 1,
        "double_q": False,
        "dueling": False,
        "td_error_loss_fn": "huber",
        "grad_clip": float(zoo["max_grad_norm"]),
    }


def _network(policy: dict[str, Any], algorithm: str) -> dict[str, Any]:
    """``policy_kwargs`` (and SB3's default policy) as our network fields."""
    defaults = {
        "ppo": {"net_arch": (64, 64), "activation_fn": "tanh", "log_std_init": 0.0},
        "sac": {"net_arch": (256, 256), "activation_fn": "relu"},
        "dqn": {"net_arch": (64, 64), "activation_fn": "relu"},
        "td3": {"net_arch": (400, 300), "activation_fn": "relu"},
    }[algorithm]
    if algorithm == "ppo":
        defaults["ortho_init"] = True
    kwargs = _take(policy, defaults)
    arch = kwargs["net_arch"]
    if isinstance(arch, Mapping):
        sizes = {tuple(layers) for layers in arch.values()}
        if len(sizes) != 1:
            raise ValueError(f"net_arch {arch} differs between networks; unsupported.")
        arch = sizes.pop()
    fields = {"hidden_sizes": tuple(int(n) for n in arch), "activation": kwargs["activation_fn"]}
    if algorithm == "ppo":
        fields.update(
            vf_share_layers=False,
            log_std_init=float(kwargs["log_std_init"]),
            ortho_init=bool(kwargs["ortho_init"]),
        )
    return fields


def _normalization(normalize: bool | Mapping[str, bool], num_envs: int, algorithm: str) -> dict:
    """``normalize: true`` (``VecNormalize``: observations and rewards) or
    ``{'norm_obs': ..., 'norm_reward': ...}`` as our fields. With ``norm_reward`` the row also
    sets ``num_envs_per_env_runner`` to its ``n_envs`` (one running return per env)."""
    if normalize is False:
        return {}
    flags = {"norm_obs": True, "norm_reward": True}
    if isinstance(normalize, Mapping):
        flags = {**flags, **normalize}
    if algorithm == "dqn":
        if flags["norm_reward"]:
            raise ValueError("DQN has norm_obs only; reward normalization does not translate.")
        flags.pop("norm_reward")
    fields: dict[str, Any] = {key: bool(value) for key, value in flags.items()}
    if fields.get("norm_reward"):
        fields["num_envs_per_env_runner"] = num_envs
    return fields
