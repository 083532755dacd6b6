"""Per-environment presets: every row builds, the SB3 translation, the look-ups and their errors."""

import dataclasses
import re

import gymnasium
import pytest

import jaxlearner as jl
from jaxlearner import anakin
from jaxlearner.algorithms.builtin import algorithm_recipe
from jaxlearner.algorithms.presets import PRESETS, Preset, preset_row, preset_rows
from jaxlearner.algorithms.presets.preset import ANY_ATARI, ANY_MINATAR
from jaxlearner.algorithms.presets.sb3 import NO_VALUE_CLIP, linear_schedule, zoo_row
from jaxlearner.training.atari import make_env

# gymnasium's Box2D spaces (shapes and action bounds), for machines without the box2d extra.
_BOX2D_SPACES = {
    "LunarLander-v3": (
        gymnasium.spaces.Box(-10.0, 10.0, (8,)),
        gymnasium.spaces.Discrete(4),
    ),
    "LunarLanderContinuous-v3": (
        gymnasium.spaces.Box(-10.0, 10.0, (8,)),
        gymnasium.spaces.Box(-1.0, 1.0, (2,)),
    ),
    "BipedalWalker-v3": (
        gymnasium.spaces.Box(-5.0, 5.0, (24,)),
        gymnasium.spaces.Box(-1.0, 1.0, (4,)),
    ),
}


def _spaces(env_id):
    if env_id == ANY_ATARI:  # the rows for every game: one of them
        env_id = "ALE/Pong-v5"
    if env_id == ANY_MINATAR:
        pytest.importorskip("gymnax")
        env = anakin.envs.make("gymnax:Asterix-MinAtar")  # 10x10x4, as Breakout and Freeway
        return env.observation_space, env.action_space
    try:
        env = make_env(env_id)
    except gymnasium.error.DependencyNotInstalled:
        if env_id not in _BOX2D_SPACES:
            raise
        return _BOX2D_SPACES[env_id]
    spaces = env.observation_space, env.action_space
    env.close()
    return spaces


@pytest.mark.parametrize("env_id", sorted(_BOX2D_SPACES))
def test_the_box2d_stand_in_spaces_have_gymnasiums_shapes_and_action_bounds(env_id):
    pytest.importorskip("Box2D", reason="the box2d extra is not installed")
    env = make_env(env_id)
    observations, actions = _BOX2D_SPACES[env_id]
    assert observations.shape == env.observation_space.shape
    assert actions == env.action_space
    env.close()


@pytest.mark.parametrize("row", PRESETS, ids=lambda row: row.name)
def test_every_row_builds_its_config_and_its_algorithm_from_gymnasiums_spaces(row):
    config = algorithm_recipe(row.algorithm).config_type(**row.config)  # unknown fields fail
    for field, value in row.config.items():
        assert getattr(config, field) == value, field
    observation_space, action_space = _spaces(row.env_id)
    algorithm = algorithm_recipe(row.algorithm).build(observation_space, action_space, config)
    assert algorithm.config == config
    if row.algorithm not in ("bc", "marwil"):  # offline: no rollouts
        steps = algorithm.rollout_steps(row.num_envs) * row.num_envs
        assert 0 < steps <= row.max_steps and row.eval_every <= row.max_steps
    assert row.typed_config() == config


def test_every_row_names_its_source_and_the_zoo_rows_their_entry():
    for row in PRESETS:
        if row.origin == "rl_zoo3":
            assert row.source.startswith(f"rl_zoo3/hyperparams/{row.algorithm}.yml: "), row.name
        elif row.origin == "published":  # a file of the repository that publishes it
            assert re.fullmatch(r"[\w.-]+/\S+(\s\(.+\))?", row.source), row.name
            assert (row.env_id == ANY_MINATAR) == ("minatar" in row.source.lower()), row.name
        else:
            assert row.source.startswith("jaxlearner: "), row.name
    covered = {(row.algorithm, row.env_id) for row in preset_rows(origin="rl_zoo3")}
    mujoco = ["HalfCheetah", "Hopper", "Walker2d", "Ant", "Humanoid", "Swimmer", "Reacher"]
    mujoco += ["InvertedPendulum", "InvertedDoublePendulum"]
    for algorithm in ("ppo", "sac"):
        assert {(algorithm, f"{name}-v5") for name in mujoco} <= covered
    classic = {"CartPole-v1", "Acrobot-v1", "MountainCar-v0", "LunarLander-v3"}
    assert {
        ("ppo", env) for env in classic | {"Pendulum-v1", "MountainCarContinuous-v0"}
    } <= covered
    assert {("dqn", env) for env in classic} <= covered
    assert {("sac", "Pendulum-v1"), ("sac", "MountainCarContinuous-v0")} <= covered


def test_the_zoo_numbers_as_typed():
    # Spot checks against rl_zoo3/hyperparams/ppo.yml: HalfCheetah-v4 and sac.yml: Humanoid-v4.
    cheetah = preset_row("ppo", "HalfCheetah-v5")
    assert cheetah.source == "rl_zoo3/hyperparams/ppo.yml: HalfCheetah-v4"
    assert (cheetah.num_envs, cheetah.max_steps, cheetah.eval_every) == (1, 1_000_000, 25_000)
    assert {k: cheetah.config[k] for k in ("lr", "train_batch_size", "minibatch_size")} == {
        "lr": 2.0633e-05,
        "train_batch_size": 512,
        "minibatch_size": 64,
    }
    assert cheetah.config["ortho_init"] is False and cheetah.config["log_std_init"] == -2.0
    assert cheetah.config["hidden_sizes"] == (256, 256) and cheetah.config["activation"] == "relu"
    assert cheetah.config["norm_obs"] and cheetah.config["norm_reward"]
    assert cheetah.config["num_envs_per_env_runner"] == 1
    assert "RL Zoo's id HalfCheetah-v4, here HalfCheetah-v5." in cheetah.notes
    humanoid = preset_row("sac", "Humanoid-v5")
    assert humanoid.max_steps == 2_000_000
    assert humanoid.config["num_steps_sampled_before_learning_starts"] == 10_000
    # SB3 acts uniformly at random for learning_starts steps: every RL Zoo SAC row says so.
    zoo_sac = preset_rows("sac", origin="rl_zoo3")
    assert zoo_sac and all(row.config["warmup_actions"] == "uniform" for row in zoo_sac)
    assert "norm_obs" not in humanoid.config


def test_the_cartpole_ppo_row_is_what_the_command_line_used_before():
    # cli/defaults.py's PPO settings before presets, RL Zoo's CartPole-v1 entry.
    before = jl.algorithms.PPOConfig(
        lr=((0, 1e-3), (100_000, 0.0)),
        clip_param=((0, 0.2), (100_000, 0.0)),
        train_batch_size=256,
        minibatch_size=256,
        num_epochs=20,
        gamma=0.98,
        lambda_=0.8,
        entropy_coeff=0.0,
        vf_loss_coeff=0.5,
        vf_clip_param=1e6,
        use_kl_loss=False,
        grad_clip=0.5,
        hidden_sizes=(64, 64),
    )
    config, row = jl.algorithms.preset("ppo", "CartPole-v1")
    # 1e10 instead of 1e6: no clipping either way (CartPole's squared errors stay below 2500);
    # Adam's epsilon and the advantages' standardization (per minibatch, here the whole batch
    # of 256) are now SB3's for PPO.
    assert (config.adam_epsilon, config.normalize_advantages) == (1e-5, "minibatch")
    restored = dataclasses.replace(
        config, vf_clip_param=1e6, adam_epsilon=1e-8, normalize_advantages=True
    )
    assert restored == before
    assert (row.num_envs, row.max_steps, row.eval_every) == (8, 100_000, 2048)


def test_a_row_tuned_here_comes_first_and_origin_picks_the_zoos():
    config, row = jl.algorithms.preset("dqn", "CartPole-v1")
    assert row.origin == "jaxlearner" and config.n_step == 10
    config, row = jl.algorithms.preset("dqn", "CartPole-v1", origin="rl_zoo3")
    assert row.source == "rl_zoo3/hyperparams/dqn.yml: CartPole-v1"
    assert (config.double_q, config.dueling, config.target_network_update_freq) == (
        False,
        False,
        10,
    )
    # train_freq 256, gradient_steps 128: half an update per env step, x 64 rows per update.
    assert (config.rollout_fragment_length, config.training_intensity) == (256, 32.0)
    assert config.epsilon == ((0, 1.0), (8000, 0.04))  # 0.16 x 5e4 env steps
    # SB3's DQN keeps PyTorch's default init; the rows keep ours (measured: presets' docs).
    assert config.ortho_init


def test_preset_names():
    assert ("ppo", "HalfCheetah-v5") in jl.algorithms.preset_names("ppo")
    assert all(algorithm == "sac" for algorithm, _ in jl.algorithms.preset_names("sac"))
    every = jl.algorithms.preset_names()
    assert len(every) == len(set(every)) and ("bc", "CartPole-v1") in every


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: jl.algorithms.preset("a2c", "CartPole-v1"), "No presets for algorithm 'a2c'; "),
        (lambda: jl.algorithms.preset("ppo", "Nope-v0"), "No ppo preset for 'Nope-v0'; ppo "),
        (lambda: jl.algorithms.preset("ppo", "Hopper-v5", "jaxlearner"), "No ppo (jaxlearner)"),
        (lambda: jl.algorithms.preset("ppo", "Hopper-v5", "sb3"), "Unknown preset origin 'sb3'"),
        (
            lambda: jl.algorithms.preset_names("a2c"),
            "No presets for algorithm 'a2c'; algorithms with",
        ),
    ],
)
def test_unknown_names_are_one_clear_error(call, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        call()


def test_a_row_with_an_unknown_field_fails():
    row = Preset("ppo", "CartPole-v1", {"learning_rate": 1e-3}, 1, 10, 10, "a test")
    with pytest.raises(ValueError, match=r"Unknown PPOConfig field\(s\) \['learning_rate'\]"):
        row.typed_config()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"num_envs": 0}, "Preset.num_envs must be a positive int; got 0."),
        (
            {"origin": "sb3"},
            "Preset.origin must be one of ('jaxlearner', 'rl_zoo3', 'published'); got 'sb3'.",
        ),
        ({"source": ""}, "Preset.source must be a non-empty string; got ''."),
    ],
)
def test_a_preset_checks_its_settings(changes, message):
    fields = {"algorithm": "ppo", "env_id": "CartPole-v1", "config": {}, "num_envs": 1}
    fields |= {"max_steps": 10, "eval_every": 10, "source": "a test", **changes}
    with pytest.raises(ValueError) as raised:
        Preset(**fields)
    assert str(raised.value) == message


def test_linear_schedules_and_clamped_minibatches():
    assert linear_schedule(2.5e-4, 1_000) == ((0, 2.5e-4), (1_000, 0.0))
    row = zoo_row(
        "ppo",
        "CartPole-v1",
        "CartPole-v1",
        {"n_timesteps": 1e4, "n_envs": 2, "n_steps": 16, "batch_size": 64, "clip_range": "lin_0.1"},
    )
    assert row.config["clip_param"] == ((0, 0.1), (10_000, 0.0))
    assert row.config["lr"] == 3e-4  # SB3's default
    assert row.config["vf_clip_param"] == NO_VALUE_CLIP and row.config["use_kl_loss"] is False
    # 16 x 2 = 32 rows per rollout: SB3 takes them as one minibatch of 32, not 64.
    assert (row.config["train_batch_size"], row.config["minibatch_size"]) == (32, 32)
    assert "batch_size 64 exceeds n_steps x n_envs = 32" in row.notes
    assert row.eval_every == 500  # 20 evaluations in a budget below 20 x 25k


def test_sac_replay_ratio_temperature_and_left_out_keys():
    row = preset_row("sac", "MountainCarContinuous-v0")
    # train_freq 32, gradient_steps 32: one update per env step, collected 32 steps at a time.
    assert (row.config["rollout_fragment_length"], row.config["training_intensity"]) == (32, None)
    assert (row.config["initial_alpha"], row.config["alpha_lr"]) == (0.1, 0.0)  # fixed 0.1
    assert row.config["hidden_sizes"] == (64, 64) and row.config["td_error_loss_fn"] == "mse"
    for left_out in ("use_sde=True left out", "use_expln=True left out", "log_std_init=-3.67"):
        assert left_out in row.notes
    # SB3: one update per step of the 4 envs together, a quarter per env step, x 256 rows.
    four_envs = zoo_row("sac", "Pendulum-v1", "x", {"n_timesteps": 1e4, "n_envs": 4})
    assert four_envs.config["training_intensity"] == 64.0
    learned = zoo_row("sac", "Pendulum-v1", "x", {"n_timesteps": 1e4, "ent_coef": "auto_0.2"})
    assert learned.config["initial_alpha"] == 0.2 and learned.config["alpha_lr"] == 3e-4
    minus_one = zoo_row("dqn", "x", "x", {"n_timesteps": 1e4, "n_envs": 2, "gradient_steps": -1})
    assert minus_one.config["training_intensity"] is None  # -1: one update per env step
    twice = zoo_row("dqn", "x", "x", {"n_timesteps": 1e4, "train_freq": 1, "gradient_steps": 2})
    assert twice.config["training_intensity"] == 64.0  # 2 updates per env step x 32 rows


NORMALIZATION_FIELDS = {"norm_obs", "norm_reward", "clip_obs", "clip_reward"}
NORMALIZATION_FIELDS |= {"num_envs_per_env_runner"}


@pytest.mark.parametrize(
    ("algorithm", "normalize", "expected"),
    [
        ("ppo", True, {"norm_obs": True, "norm_reward": True, "num_envs_per_env_runner": 4}),
        ("sac", {"norm_obs": True, "norm_reward": False}, {"norm_obs": True, "norm_reward": False}),
        ("dqn", {"norm_reward": False}, {"norm_obs": True}),
    ],
)
def test_normalize_maps_to_the_normalization_fields(algorithm, normalize, expected):
    row = zoo_row(algorithm, "x", "x", {"n_timesteps": 1e4, "n_envs": 4, "normalize": normalize})
    assert {k: v for k, v in row.config.items() if k in NORMALIZATION_FIELDS} == expected


@pytest.mark.parametrize(
    ("hyperparams", "message"),
    [
        ({"n_timesteps": 1, "learning_rat": 1e-3}, "Unknown zoo keys ['learning_rat']"),
        ({"n_timesteps": 1, "learning_rate": "exp_1e-3"}, "RL Zoo schedules look like"),
        (
            {"n_timesteps": 1, "policy_kwargs": {"net_arch": {"pi": (64,), "vf": (32,)}}},
            "differs between networks",
        ),
        ({"n_timesteps": 1, "policy_kwargs": {"share": True}}, "Unknown zoo keys ['share']"),
    ],
)
def test_a_zoo_entry_that_does_not_translate_fails_naming_it(hyperparams, message):
    with pytest.raises(ValueError, match="^rl_zoo3/hyperparams/ppo.yml: E-v0: ") as raised:
        zoo_row("ppo", "E-v0", "E-v0", hyperparams)
    assert message in str(raised.value)


def test_zoo_ppo_rows_use_sb3s_adam_epsilon_and_the_library_keeps_pytorchs():
    rows = jl.algorithms.presets.preset_rows("ppo", origin="rl_zoo3")
    assert rows and all(row.config["adam_epsilon"] == 1e-5 for row in rows)
    assert jl.algorithms.PPOConfig().adam_epsilon == 1e-8
    with pytest.raises(ValueError, match="adam_epsilon"):
        jl.algorithms.PPOConfig(adam_epsilon=0.0)


def test_zoo_ppo_rows_standardize_advantages_per_minibatch_as_sb3():
    rows = jl.algorithms.presets.preset_rows("ppo", origin="rl_zoo3")
    assert rows and all(row.config["normalize_advantages"] == "minibatch" for row in rows)
    off = zoo_row("ppo", "E-v0", "E-v0", {"n_timesteps": 1e4, "normalize_advantage": False})
    assert off.config["normalize_advantages"] is False
    assert jl.algorithms.PPOConfig().normalize_advantages is True  # the library's: RLlib's


def test_ppos_adam_gets_the_configs_epsilon():
    env = gymnasium.make("CartPole-v1")
    config = jl.algorithms.PPOConfig(adam_epsilon=1e-5, hidden_sizes=(8,))
    learner = jl.algorithms.ppo(env.observation_space, env.action_space, config)
    (optimizer,) = learner.specs["default_policy"].named_optimizers.values()
    assert optimizer.hyperparams["eps"] == 1e-5


def test_the_minatar_rows_cover_every_minatar_game_with_their_sources_networks():
    """DQN: MinAtar's CNN (its dqn.py); PPO: gymnax-blines' 2x256 MLPs on the flat grid."""
    for game in ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders"):
        for algorithm in ("ppo", "dqn"):
            config, row = jl.algorithms.preset(algorithm, f"gymnax:{game}-MinAtar")
            assert row.env_id == ANY_MINATAR and row.origin == "published"
        dqn, _ = jl.algorithms.preset("dqn", f"gymnax:{game}-MinAtar")
        assert dqn.conv_filters == ((16, 3, 1),) and dqn.conv_padding == "valid"
        assert dqn.hidden_sizes == (128,)
        ppo, _ = jl.algorithms.preset("ppo", f"gymnax:{game}-MinAtar")
        assert ppo.conv_filters == () and ppo.hidden_sizes == (256, 256)
        assert ppo.activation == "relu" and ppo.vf_share_layers is False
    assert not preset_rows("ppo", "gymnax:CartPole-v1") and not preset_rows("ppo", "MinAtar")
    dqn, _ = jl.algorithms.preset("dqn", "gymnax:Breakout-MinAtar")
    assert (dqn.train_batch_size, dqn.replay_buffer_capacity, dqn.lr) == (32, 100_000, 2.5e-4)
    ppo, row = jl.algorithms.preset("ppo", "gymnax:Breakout-MinAtar", origin="published")
    assert ppo.train_batch_size == row.num_envs * 128 and ppo.minibatch_size == 1024
