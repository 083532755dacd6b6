"""``ortho_init``: orthogonal initialisation (the default) or PyTorch's; the same param tree."""

import math

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxlearner as jl
from jaxlearner.algorithms.networks.encoders import CNN, MLP, dense, torch_bias_init
from jaxlearner.algorithms.networks.models import actor_critic

OBS = gymnasium.spaces.Box(-1.0, 1.0, (17,))
ACTIONS = gymnasium.spaces.Box(-1.0, 1.0, (6,))


def _params(ortho_init, share=False, head_hidden=()):
    model = actor_critic(
        OBS,
        ACTIONS,
        (256, 256),
        "relu",
        share_encoder=share,
        log_std_init=-2.0,
        head_hidden_sizes=head_hidden,
        ortho_init=ortho_init,
    )
    return model.init(jax.random.key(0), jnp.zeros((1, 17)))["params"]


def _leaves(params):
    return {jax.tree_util.keystr(path): x for path, x in jax.tree.leaves_with_path(params)}


@pytest.mark.parametrize(("share", "head_hidden"), [(False, ()), (True, ()), (False, (32,))])
def test_the_param_tree_is_the_same_either_way(share, head_hidden):
    # Same names and shapes: a checkpoint of one restores into the other.
    ortho, torch = _params(True, share, head_hidden), _params(False, share, head_hidden)
    assert jax.tree.structure(ortho) == jax.tree.structure(torch)
    assert jax.tree.map(jnp.shape, ortho) == jax.tree.map(jnp.shape, torch)


def test_orthogonal_init_has_its_gains_and_zero_biases():
    params = _leaves(_params(True))
    hidden = params["['actor']['encoder']['mlp']['dense_1']['kernel']"]  # [256, 256]
    # An orthogonal matrix times the gain: W^T W = gain^2 I, gain sqrt(2) for hidden layers.
    np.testing.assert_allclose(hidden.T @ hidden, 2.0 * np.eye(256), atol=1e-4)
    mean = params["['actor']['head']['mean']['kernel']"]  # [256, 6]: orthonormal columns x 0.01
    np.testing.assert_allclose(mean.T @ mean, 1e-4 * np.eye(6), atol=1e-8)
    value = params["['critic']['head']['value']['kernel']"]  # [256, 1], gain 1
    np.testing.assert_allclose(float(jnp.sum(value**2)), 1.0, rtol=1e-5)
    for name, x in params.items():
        if name.endswith("['bias']"):
            assert not np.any(np.asarray(x)), name
    np.testing.assert_array_equal(params["['actor']['head']['log_std']"], np.full(6, -2.0))


def test_pytorch_init_draws_uniform_in_one_over_sqrt_fan_in():
    # PyTorch's nn.Linear: kernel and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)); the kernel's
    # variance is bound^2 / 3 = 1 / (3 fan_in).
    params = _leaves(_params(False))
    for prefix, fan_in in [
        ("['actor']['encoder']['mlp']['dense_0']", 17),
        ("['critic']['encoder']['mlp']['dense_1']", 256),
        ("['actor']['head']['mean']", 256),
        ("['critic']['head']['value']", 256),
    ]:
        bound = 1.0 / math.sqrt(fan_in)
        kernel, bias = params[prefix + "['kernel']"], params[prefix + "['bias']"]
        assert float(jnp.max(jnp.abs(kernel))) <= bound and float(jnp.max(jnp.abs(bias))) <= bound
        assert float(jnp.max(jnp.abs(bias))) > 0.2 * bound, prefix  # drawn, not zeros
        if kernel.size >= 1000:
            np.testing.assert_allclose(float(jnp.var(kernel)), bound**2 / 3, rtol=0.1)
    np.testing.assert_array_equal(params["['actor']['head']['log_std']"], np.full(6, -2.0))


def test_dense_and_cnn_take_either_init():
    x = jnp.ones((2, 4))
    layer = dense(3, 1.0, "out", fan_in=4, ortho_init=False)
    params = layer.init(jax.random.key(1), x)["params"]
    assert float(jnp.max(jnp.abs(params["bias"]))) <= 0.5
    bias = torch_bias_init(100)(jax.random.key(2), (1000,))
    assert float(jnp.min(bias)) >= -0.1 and float(jnp.max(bias)) <= 0.1
    for ortho_init in (True, False):
        cnn = CNN((4,), (3,), (1,), ortho_init=ortho_init)
        conv = cnn.init(jax.random.key(0), jnp.zeros((1, 5, 5, 2)))["params"]["conv_0"]
        bound = 1.0 / math.sqrt(2 * 3 * 3)  # fan_in = in_channels * kernel area
        assert bool(jnp.all(conv["bias"] == 0)) == ortho_init
        if not ortho_init:
            assert float(jnp.max(jnp.abs(conv["kernel"]))) <= bound
    mlp = MLP((8,), "tanh", ortho_init=False)
    assert float(jnp.max(jnp.abs(mlp.init(jax.random.key(0), x)["params"]["dense_0"]["bias"]))) > 0


@pytest.mark.parametrize("name", ["ppo", "appo", "marwil"])
def test_configs_take_ortho_init_and_build_the_same_tree(name):
    env = gymnasium.make("Pendulum-v1")
    states = [
        jl.algorithms.algorithm_recipe(name)
        .learner(env.observation_space, env.action_space, {"ortho_init": value})
        .init(jax.random.key(0))
        for value in (True, False)
    ]
    assert jax.tree.structure(states[0].modules) == jax.tree.structure(states[1].modules)
    biases = [
        _leaves(state.modules["default_policy"].params)[
            "['params']['actor']['encoder']['mlp']['dense_0']['bias']"
        ]
        for state in states
    ]
    assert not np.any(np.asarray(biases[0])) and np.any(np.asarray(biases[1]))


def test_recurrent_ppo_takes_ortho_init():
    env = gymnasium.make("Pendulum-v1")
    config = {"ortho_init": False, "use_lstm": True, "lstm_cell_size": 8, "minibatch_size": 40}
    learner = jl.algorithms.ppo(env.observation_space, env.action_space, config)
    assert learner.init(jax.random.key(0)) is not None


@pytest.mark.parametrize("value", ["no", 0, None])
def test_ortho_init_must_be_a_bool(value):
    with pytest.raises(TypeError, match=r"PPOConfig.ortho_init must be True or False; got"):
        jl.algorithms.PPOConfig(ortho_init=value)


@pytest.mark.parametrize("dueling", [False, True])
def test_dqn_takes_ortho_init_as_sb3s_dqn_keeps_pytorchs(dueling):
    # SB3's DQN keeps PyTorch's nn.Linear init; ortho_init=False draws it in every layer, with
    # the same param tree as the orthogonal default.
    env = gymnasium.make("CartPole-v1")
    config = {"hidden_sizes": (64, 64), "dueling": dueling}
    modules = [
        jl.algorithms.dqn(env.observation_space, env.action_space, {**config, "ortho_init": value})
        .init(jax.random.key(0))
        .modules["default_policy"]
        .params
        for value in (True, False)
    ]
    assert jax.tree.structure(modules[0]) == jax.tree.structure(modules[1])
    ortho, torch = _leaves(modules[0]), _leaves(modules[1])
    assert len(torch) >= 6
    for name, x in torch.items():
        if name.endswith("['kernel']"):
            fan_in = x.shape[0]
            bias = torch[name.replace("['kernel']", "['bias']")]
            assert float(jnp.max(jnp.abs(x))) <= 1 / math.sqrt(fan_in), name
            assert float(jnp.max(jnp.abs(bias))) > 0, name  # drawn, not zeros
            assert not np.any(np.asarray(ortho[name.replace("['kernel']", "['bias']")])), name
    with pytest.raises(TypeError, match="ortho_init"):
        jl.algorithms.dqn(env.observation_space, env.action_space, {"ortho_init": "no"})
