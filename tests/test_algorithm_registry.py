"""The algorithm registry: algorithms register themselves where they are defined."""

import dataclasses
import importlib
import inspect
import json
import pydoc
import subprocess
import sys
from typing import Any

import flax.linen as nn
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxlearner as jl
from jaxlearner.algorithms import OfflineAlgorithm, OffPolicyAlgorithm, OnPolicyAlgorithm
from jaxlearner.algorithms.builtin import (
    BuiltinAlgorithm,
    algorithm_names,
    algorithm_recipe,
    recipe_json,
    register_algorithm,
    register_builtin,
)
from jaxlearner.core import registry as core_registry


@dataclasses.dataclass(frozen=True)
class TinyConfig:
    """A tiny imitation algorithm's config, for this test file only."""

    lr: float = 0.1
    train_batch_size: int = 8


def tiny_loss(params, batch, ctx):
    logits = ctx.apply(params, batch["obs"])
    chosen = jnp.take_along_axis(jax.nn.log_softmax(logits), batch["actions"][:, None], 1)
    loss = -jnp.mean(chosen)
    return loss, {"loss": loss}


def make_tiny_learner(observation_space, action_space, config):
    rows = config.train_batch_size
    sample = {
        "obs": np.zeros((rows, *observation_space.shape), np.float32),
        "actions": np.zeros(rows, np.int32),
    }
    spec = jl.ModuleSpec(nn.Dense(int(action_space.n)), tiny_loss, optax.sgd(config.lr))
    return jl.Learner(
        {"default_policy": spec},
        sample_batch={"default_policy": sample},
        recipe=recipe_json("tiny_imitation", observation_space, action_space, config),
    )


def make_tiny_algorithm(learner, action_space, config):
    model = learner.specs["default_policy"].model

    def act(module, obs, key):
        del key
        return jnp.argmax(model.apply(module.params, obs), -1), {}

    return OfflineAlgorithm(
        name="tiny_imitation",
        module_id="default_policy",
        learner=learner,
        config=config,
        explore=act,
        exploit=act,
        rows=lambda steps: {"obs": steps["obs"], "actions": steps["actions"]},
        train_batch_size=config.train_batch_size,
    )


TINY = BuiltinAlgorithm("tiny_imitation", TinyConfig, make_tiny_learner, make_tiny_algorithm)
TINY_DOC = """A tiny imitation :class:`~jaxlearner.Learner`, for this test file only.

    Example:
      >>> learner = tiny_imitation(obs_space, act_space)  # doctest: +SKIP
    """
SPACES = (gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Discrete(2))


@pytest.fixture
def tiny(monkeypatch):
    """The tiny algorithm's registration line, run against a copy of the registry."""
    monkeypatch.setattr(core_registry, "_BUILDERS", dict(core_registry.recipe_builders()))
    build, tiny_imitation = register_builtin(
        TINY, OfflineAlgorithm, parts="learner, act and rows", doc=TINY_DOC
    )
    return build, tiny_imitation


def test_an_algorithm_registers_itself_and_is_built_by_name(tiny):
    assert "tiny_imitation" in algorithm_names()
    assert "tiny_imitation" in jl.registered_recipes()
    assert algorithm_recipe("tiny_imitation") is TINY
    algorithm = jl.algorithms.build("tiny_imitation", *SPACES, {"lr": 0.5})
    assert isinstance(algorithm, OfflineAlgorithm)
    assert algorithm.config == TinyConfig(lr=0.5)
    learner = algorithm.learner
    assert learner.recipe["algorithm"] == "tiny_imitation"
    assert learner.recipe["config"] == {"lr": 0.5, "train_batch_size": 8}
    state = learner.init(jax.random.key(0))
    batch = {"obs": np.ones((8, 3), np.float32), "actions": np.ones(8, np.int32)}
    state, metrics = learner.update(state, batch)
    assert np.isfinite(float(metrics["default_policy"]["loss"]))
    again = jl.algorithms.algorithm_for(learner)
    assert again.learner is learner and again.config == algorithm.config
    assert jl.learner_from_recipe(learner.recipe).recipe == learner.recipe
    assert jl.algorithms.from_recipe(learner.recipe).config == algorithm.config
    with pytest.raises(ValueError, match=r"Unknown TinyConfig field\(s\) \[.learning_rate.\]"):
        jl.algorithms.build("tiny_imitation", *SPACES, {"learning_rate": 0.5})


def test_register_builtin_makes_build_and_the_named_constructor(tiny):
    build, tiny_imitation = tiny
    assert tiny_imitation.__name__ == "tiny_imitation" and build.__name__ == "build"
    assert tiny_imitation.__module__ == build.__module__ == __name__
    learner = tiny_imitation(*SPACES, TinyConfig(lr=0.2))
    assert isinstance(learner, jl.Learner) and learner.recipe["config"]["lr"] == 0.2
    assert isinstance(build(*SPACES), OfflineAlgorithm)
    for function, returns in [(tiny_imitation, jl.Learner), (build, OfflineAlgorithm)]:
        signature = inspect.signature(function)
        assert list(signature.parameters) == ["observation_space", "action_space", "config"]
        assert signature.parameters["config"].annotation == TinyConfig | dict[str, Any] | None
        assert signature.parameters["config"].default is None
        assert signature.return_annotation is returns
    assert tiny_imitation.__doc__ == inspect.cleandoc(TINY_DOC)
    assert build.__doc__.splitlines()[0] == (
        "TINY_IMITATION's :class:`~jaxlearner.algorithms.OfflineAlgorithm` (learner, act and rows)."
    )
    assert "  config: a :class:`TinyConfig`, a dict of its fields, or ``None``." in build.__doc__
    assert "A tiny imitation" in pydoc.render_doc(tiny_imitation, renderer=pydoc.plaintext)


BUILT_IN = [
    ("ppo", "A PPO", OnPolicyAlgorithm, "CartPole-v1"),
    ("appo", "An APPO", OnPolicyAlgorithm, "CartPole-v1"),
    ("dqn", "A DQN", OffPolicyAlgorithm, "CartPole-v1"),
    ("sac", "A SAC", OffPolicyAlgorithm, "Pendulum-v1"),
    ("td3", "A TD3", OffPolicyAlgorithm, "Pendulum-v1"),
    ("pqn", "A PQN", OnPolicyAlgorithm, "CartPole-v1"),
    ("bc", "A BC", OfflineAlgorithm, "CartPole-v1"),
    ("marwil", "A MARWIL", OfflineAlgorithm, "CartPole-v1"),
]


@pytest.mark.parametrize("name, article, kind, env_id", BUILT_IN)
def test_built_in_constructors_keep_their_names_signatures_and_docstrings(
    name, article, kind, env_id
):
    module = importlib.import_module(f"jaxlearner.algorithms.{name}")
    constructor = getattr(module, name)
    assert getattr(jl.algorithms, name) is constructor
    assert algorithm_recipe(name) is module.RECIPE
    config = inspect.signature(constructor).parameters["config"].annotation
    assert config == module.RECIPE.config_type | dict[str, Any] | None
    assert inspect.signature(module.build).return_annotation is kind
    assert constructor.__doc__.startswith(f"{article} :class:`~jaxlearner.Learner`")
    assert f"jl.algorithms.{name}(" in constructor.__doc__
    assert module.build.__doc__.startswith(f"{name.upper()}'s :class:`~jaxlearner.algorithms.")
    env = gym.make(env_id)
    assert isinstance(module.build(env.observation_space, env.action_space), kind)
    assert constructor(env.observation_space, env.action_space).recipe["algorithm"] == name


def test_register_algorithm_refuses_a_plain_builder():
    with pytest.raises(TypeError, match="needs an AlgorithmRecipe .* jl.register_recipe"):
        register_algorithm(lambda recipe: None)


def test_a_recipe_loader_registers_on_first_need(monkeypatch):
    monkeypatch.setattr(core_registry, "_BUILDERS", dict(core_registry.recipe_builders()))
    monkeypatch.setattr(core_registry, "_LOADERS", [])
    calls = []

    def loader():
        calls.append(1)
        jl.register_recipe("lazy_tiny", lambda recipe: TINY(TINY_RECIPE), replace=True)

    core_registry.register_recipe_loader(loader)
    core_registry.register_recipe_loader(loader)  # added once
    assert "lazy_tiny" not in core_registry._BUILDERS
    learner = jl.learner_from_recipe({"algorithm": "lazy_tiny"})
    assert learner.recipe["algorithm"] == "tiny_imitation" and calls == [1]
    assert "lazy_tiny" in jl.registered_recipes()
    with pytest.raises(TypeError, match="needs a callable loader"):
        core_registry.register_recipe_loader("jaxlearner.algorithms")


TINY_RECIPE = recipe_json("tiny_imitation", *SPACES, TinyConfig())


@pytest.mark.parametrize("call", ["learner_from_recipe", "restore"])
def test_a_fresh_process_rebuilds_a_built_in_learner_after_import_jaxlearner(tmp_path, call):
    """``import jaxlearner`` loads no algorithm; the registry loads them when a recipe names one."""
    learner = jl.algorithms.bc(*SPACES)
    if call == "restore":
        with jl.CheckpointManager(tmp_path) as ckpt:
            ckpt.save(1, learner.init(jax.random.key(0)), learner)
        argument = repr(str(tmp_path))
    else:
        argument = f"json.loads({json.dumps(json.dumps(learner.recipe))})"
    script = f"""
import json, sys
import jaxlearner as jl
assert "jaxlearner.algorithms" not in sys.modules
rebuilt = jl.{call}({argument})
rebuilt = rebuilt[0] if isinstance(rebuilt, tuple) else rebuilt
print(json.dumps(rebuilt.recipe))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == learner.recipe
