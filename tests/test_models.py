"""Models built from gymnasium spaces: shapes, param paths, hand-checked outputs, errors."""

import os
import subprocess
import sys

import flax.linen as nn
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import maybe_jit

import jaxlearner as jl
from jaxlearner.algorithms.networks.distribution_spec import DistributionSpec, make_distribution
from jaxlearner.algorithms.networks.distributions import (
    Categorical,
    DiagGaussian,
    MultiCategorical,
    TanhGaussian,
)
from jaxlearner.algorithms.networks.encoders import CNN, MLP, Encoder, encoder_for, orthogonal
from jaxlearner.algorithms.networks.heads import ValueHead, distribution_for, with_hidden_layers
from jaxlearner.algorithms.networks.models import actor_critic, q_network, sac_networks
from jaxlearner.core.optimizer import label_params

spaces = gymnasium.spaces
BOX = spaces.Box(-1.0, 1.0, (4,))
IMAGE = spaces.Box(0, 255, (12, 12, 3), np.uint8)
UNSUPPORTED = [
    spaces.Dict({"a": spaces.Discrete(2)}),
    spaces.Tuple((spaces.Discrete(2),)),
    spaces.Text(5),
    spaces.Graph(spaces.Box(0, 1, (2,)), None),
]


def shapes(tree):
    return jax.tree.map(jnp.shape, tree)


def init(model, *inputs, **kwargs):
    """``model.init`` with a fixed key, eagerly: the tests share their per-shape compilations."""
    return model.init(jax.random.key(0), *inputs, **kwargs)


def abstract_init(model, *inputs, **kwargs):
    """Param shapes from ``model.init`` traced with ``jax.eval_shape`` (nothing compiled)."""
    return shapes(jax.eval_shape(lambda: model.init(jax.random.key(0), *inputs, **kwargs)))


def test_mlp_matches_hand_computation(jit):
    mlp = MLP((3, 2), "relu")
    x = jnp.asarray([[0.5, -1.0], [2.0, 0.0]])
    params = init(mlp, x)
    out = maybe_jit(mlp.apply, jit)(params, x)
    p = params["params"]
    h = np.maximum(x @ p["dense_0"]["kernel"] + p["dense_0"]["bias"], 0)
    expected = np.maximum(h @ p["dense_1"]["kernel"] + p["dense_1"]["bias"], 0)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(MLP((), "tanh").apply({}, x), x)  # no layers: the identity


def test_model_config_validation():
    with pytest.raises(ValueError, match=r"Unknown activation 'relu6'; valid names: \['elu'"):
        MLP((8,), "relu6")
    with pytest.raises(ValueError, match=r"MLP.hidden_sizes must be positive ints; got \(8, 0\)"):
        MLP((8, 0))
    with pytest.raises(ValueError, match="one entry per layer"):
        CNN(channels=(8, 8), kernel_sizes=(3,), strides=(1,))
    with pytest.raises(ValueError, match="kind must be 'vector', 'one_hot' or 'image'"):
        Encoder((3,), "sequence")


def test_cnn_scales_uint8_and_keeps_batch_axes(jit):
    cnn = CNN(channels=(4, 8), kernel_sizes=(3, 3), strides=(2, 1))
    images = jax.random.randint(jax.random.key(0), (2, 3, 10, 10, 3), 0, 256).astype(jnp.uint8)
    params = init(cnn, images)
    apply = maybe_jit(cnn.apply, jit)
    features = apply(params, images)
    # SAME padding: 10 -> 5 (stride 2) -> 5 (stride 1); 5 * 5 * 8 = 200 features.
    assert features.shape == (2, 3, 200)
    np.testing.assert_allclose(features, apply(params, images / 255.0), rtol=1e-5, atol=1e-6)


def test_encoder_for_preprocesses_each_space(jit):
    # With no MLP layers the encoder's output is the preprocessed observation.
    discrete = encoder_for(spaces.Discrete(3, start=2), hidden_sizes=())
    out = maybe_jit(discrete.apply, jit)({}, jnp.asarray([2, 4]))
    np.testing.assert_array_equal(out, [[1, 0, 0], [0, 0, 1]])  # values 2..4 -> indices 0..2
    multi = encoder_for(spaces.MultiDiscrete([2, 3]), hidden_sizes=())
    np.testing.assert_array_equal(multi.apply({}, jnp.asarray([1, 2])), [0, 1, 0, 0, 1])
    binary = encoder_for(spaces.MultiBinary(3), hidden_sizes=())
    np.testing.assert_array_equal(binary.apply({}, jnp.asarray([[1, 0, 1]], jnp.int8)), [[1, 0, 1]])
    matrix = encoder_for(spaces.Box(-1, 1, (2, 3)), hidden_sizes=())
    obs = jnp.arange(12.0).reshape(2, 2, 3)
    np.testing.assert_array_equal(matrix.apply({}, obs), obs.reshape(2, 6))


def test_encoder_for_chooses_cnn_for_images_and_mlp_otherwise():
    image = abstract_init(encoder_for(IMAGE, (16,), "relu"), jnp.zeros((2, 12, 12, 3), jnp.uint8))
    assert set(image["params"]) == {"cnn", "mlp"}
    # Default CNN, SAME padding: 12 -> 3 -> 2 -> 2; 2 * 2 * 64 = 256 inputs to the MLP.
    assert image["params"]["cnn"]["conv_0"]["kernel"] == (8, 8, 3, 32)
    assert image["params"]["mlp"]["dense_0"]["kernel"] == (256, 16)
    vector = encoder_for(BOX, (8, 8), "silu")
    assert abstract_init(vector, jnp.zeros((5, 4)))["params"] == {
        "mlp": {
            "dense_0": {"kernel": (4, 8), "bias": (8,)},
            "dense_1": {"kernel": (8, 8), "bias": (8,)},
        }
    }
    with pytest.raises(ValueError, match=r"expects observations \[\.\.\., \*\(4,\)\]; got shape"):
        abstract_init(vector, jnp.zeros((5, 3)))


@pytest.mark.parametrize("name", ["ppo", "appo", "dqn", "marwil", "bc"])
def test_conv_filters_choose_the_cnn_of_every_image_algorithm(name):
    """RLlib's ``conv_filters``: MinAtar's network (16 3x3 filters, stride 1) on 10x10x4, from
    JSON lists as ``--config`` gives them; the config keeps tuples, and bad ones are named."""
    space, actions = gymnasium.spaces.Box(0, 1, (10, 10, 4)), gymnasium.spaces.Discrete(3)
    config = {"conv_filters": [[16, 3, 1]], "hidden_sizes": [128]}
    algorithm = jl.algorithms.build(name, space, actions, config)
    assert algorithm.config.conv_filters == ((16, 3, 1),)
    params = algorithm.learner.init(jax.random.key(0)).modules[algorithm.module_id].params
    shapes = [leaf.shape for leaf in jax.tree.leaves(params)]
    assert (3, 3, 4, 16) in shapes and (1600, 128) in shapes  # SAME: 10x10x16 features
    assert all(len(shape) != 4 or shape == (3, 3, 4, 16) for shape in shapes)  # one layer
    with pytest.raises(ValueError, match=r"conv_filters must be None .* got \[\[16, 3\]\]"):
        jl.algorithms.build(name, space, actions, {"conv_filters": [[16, 3]]})
    with pytest.raises(ValueError, match="leaves nothing of a 10x10 image at convolution 1"):
        valid = {"conv_filters": [[16, 3, 1], [8, 9, 1]], "conv_padding": "valid"}
        jl.algorithms.build(name, space, actions, valid)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_empty_conv_filters_flatten_the_image_into_the_mlp(jit):
    """``conv_filters=()`` (gymnax-blines' MinAtar network): no convolution; the encoder is an
    MLP on the flattened pixels, integer ones scaled by 1/255 as the CNN scales them."""
    for dtype, scale in ((np.float32, 1.0), (np.uint8, 1 / 255)):
        space = gymnasium.spaces.Box(0, 255, (10, 10, 4), dtype)
        encoder = encoder_for(space, (16,), "relu", conv_filters=[])
        obs = np.random.default_rng(0).integers(0, 255, (3, 10, 10, 4)).astype(dtype)
        params = encoder.init(jax.random.key(0), obs)
        assert jax.tree.map(jnp.shape, params)["params"] == {
            "mlp": {"dense_0": {"kernel": (400, 16), "bias": (16,)}}
        }
        mlp = MLP((16,), "relu")
        flat = obs.reshape(3, -1).astype(np.float32) * scale
        expected = mlp.apply({"params": params["params"]["mlp"]}, flat)
        got = maybe_jit(encoder.apply, jit)(params, obs)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)  # x / 255 vs x * (1 / 255)
    algorithm = jl.algorithms.build(
        "ppo", space, gymnasium.spaces.Discrete(3), {"conv_filters": [], "hidden_sizes": [8]}
    )
    assert algorithm.config.conv_filters == ()
    shapes = [leaf.shape for leaf in jax.tree.leaves(algorithm.learner.init(jax.random.key(0)))]
    assert not any(len(shape) == 4 for shape in shapes)  # no convolution kernel anywhere


@pytest.mark.parametrize("space", UNSUPPORTED, ids=lambda s: type(s).__name__)
def test_unsupported_spaces_are_named(space):
    with pytest.raises(TypeError, match=r"encoder_for supports observation spaces \('Box'"):
        encoder_for(space)
    with pytest.raises(TypeError, match=r"distribution_for supports action spaces \('Discrete'"):
        distribution_for(space)


def test_distribution_for_each_action_space():
    assert distribution_for(spaces.Discrete(4)) == DistributionSpec("categorical", (4,))
    assert distribution_for(spaces.MultiDiscrete([2, 5])) == DistributionSpec(
        "multi_categorical", (2, 5)
    )
    assert distribution_for(spaces.MultiBinary(3)).sizes == (2, 2, 2)
    assert distribution_for(BOX) == DistributionSpec("diag_gaussian", (4,))
    assert distribution_for(BOX, squash=True) == DistributionSpec("tanh_gaussian", (4,))
    bounded = distribution_for(spaces.Box(np.float32([0, -2]), np.float32([1, 2])), True)
    assert bounded.low == (0.0, -2.0) and bounded.high == (1.0, 2.0)
    with pytest.raises(ValueError, match=r"supports 1-D Box action spaces; got shape \(2, 2\)"):
        distribution_for(spaces.Box(-1, 1, (2, 2)))
    with pytest.raises(ValueError, match="must be finite"):
        distribution_for(spaces.Box(-np.inf, np.inf, (2,)), squash=True)


@pytest.mark.parametrize(
    ("action_space", "kind", "action_shape"),
    [
        (spaces.Discrete(3), Categorical, ()),
        (spaces.MultiDiscrete([2, 3]), MultiCategorical, (2,)),
        (spaces.Box(-2.0, 2.0, (2,)), DiagGaussian, (2,)),
    ],
)
def test_actor_critic_outputs_make_the_policy(jit, action_space, kind, action_shape):
    model = actor_critic(BOX, action_space, hidden_sizes=(8,))
    obs = jax.random.normal(jax.random.key(0), (5, 4))
    params = init(model, obs)
    spec = distribution_for(action_space)

    def act(params, obs, key):
        dist_inputs, value = model.apply(params, obs)
        dist = make_distribution(spec, dist_inputs)
        action, log_prob = dist.sample_and_log_prob(key)
        return dist_inputs, value, action, log_prob

    dist_inputs, value, action, log_prob = maybe_jit(act, jit)(params, obs, jax.random.key(2))
    assert dist_inputs.shape == (5, spec.num_inputs) and value.shape == (5,)
    assert isinstance(make_distribution(spec, dist_inputs), kind)
    assert action.shape == (5, *action_shape) and log_prob.shape == (5,)
    assert np.isfinite(np.asarray(log_prob)).all()


def test_actor_critic_param_paths_separate_and_shared():
    obs = jnp.zeros((2, 4))
    separate = actor_critic(BOX, spaces.Box(-1, 1, (2,)), (8,), log_std_init=-0.5)
    params = abstract_init(separate, obs)
    assert set(params["params"]) == {"actor", "critic"}
    assert set(params["params"]["actor"]) == {"encoder", "head"}
    assert params["params"]["actor"]["head"]["log_std"] == (2,)
    labels = label_params(params, ["actor", "critic"], None, "ppo")
    assert set(jax.tree.leaves(labels["params"]["critic"])) == {"critic"}
    shared = actor_critic(BOX, spaces.Discrete(2), (8,), share_encoder=True)
    assert set(abstract_init(shared, obs)["params"]) == {"encoder", "actor", "critic"}


def test_head_hidden_layers_match_hand_computation(jit):
    assert isinstance(with_hidden_layers(ValueHead()), ValueHead)  # no layers: the head itself
    head = with_hidden_layers(ValueHead(), (3,), "relu")
    features = jax.random.normal(jax.random.key(1), (5, 4))
    params = init(head, features)
    p = params["params"]
    dense = p["hidden"]["dense_0"]
    hidden = np.maximum(features @ dense["kernel"] + dense["bias"], 0)
    expected = (hidden @ p["head"]["value"]["kernel"] + p["head"]["value"]["bias"])[:, 0]
    out = maybe_jit(head.apply, jit)(params, features)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"MLP.hidden_sizes must be positive ints; got \(0,\)"):
        with_hidden_layers(ValueHead(), (0,))
    with pytest.raises(ValueError, match="Unknown activation 'relu6'"):
        with_hidden_layers(ValueHead(), (4,), "relu6")


def test_actor_critic_head_hidden_sizes_sit_between_encoder_and_heads():
    obs = jnp.zeros((2, 4))
    plain = abstract_init(actor_critic(BOX, spaces.Discrete(2), (8,)), obs)["params"]
    assert set(plain["actor"]["head"]) == {"logits"}  # the default: linear heads, as before
    separate = actor_critic(BOX, spaces.Discrete(2), (8,), head_hidden_sizes=(6,))
    params = abstract_init(separate, obs)["params"]
    assert params["actor"]["head"]["hidden"]["dense_0"]["kernel"] == (8, 6)
    assert params["critic"]["head"]["head"]["value"]["kernel"] == (6, 1)
    shared = actor_critic(BOX, spaces.Discrete(2), (8,), share_encoder=True, head_hidden_sizes=(6,))
    params = abstract_init(shared, obs)["params"]
    assert params["actor"]["hidden"]["dense_0"]["kernel"] == (8, 6)
    assert params["critic"]["head"]["value"]["kernel"] == (6, 1)


def test_actor_critic_initial_policy(jit):
    model = actor_critic(BOX, spaces.Box(-1, 1, (2,)), (8,), share_encoder=True, log_std_init=-0.5)
    obs = jax.random.normal(jax.random.key(1), (9, 4))
    params = init(model, obs)
    dist_inputs, _ = maybe_jit(model.apply, jit)(params, obs)
    # Policy head gain 0.01: initial means are near zero; log_std starts at log_std_init.
    assert float(jnp.max(jnp.abs(dist_inputs[:, :2]))) < 0.1
    np.testing.assert_array_equal(dist_inputs[:, 2:], np.full((9, 2), -0.5, np.float32))


def test_q_network_shapes_and_dueling_decomposition(jit):
    model = q_network(BOX, spaces.Discrete(5), hidden_sizes=(8,), dueling=True)
    obs = jax.random.normal(jax.random.key(0), (3, 4))
    params = init(model, obs)
    apply = maybe_jit(lambda p, o: model.apply(p, o, capture_intermediates=True), jit)
    q, state = apply(params, obs)
    assert q.shape == (3, 5)
    # Dueling: q = V + A - mean(A), so the mean Q over actions is the value stream.
    (value,) = state["intermediates"]["value"]["__call__"]
    np.testing.assert_allclose(q.mean(-1), value[:, 0], rtol=1e-5, atol=1e-6)
    plain = q_network(BOX, spaces.Discrete(2))
    assert set(abstract_init(plain, jnp.zeros((1, 4)))["params"]) == {"encoder", "q"}
    # RLlib's old-stack dueling streams: a hidden layer each before the output layer.
    deep = q_network(BOX, spaces.Discrete(3), (8,), dueling=True, head_hidden_sizes=(16,))
    shapes = abstract_init(deep, jnp.zeros((1, 4)))["params"]
    assert set(shapes) == {"encoder", "value_hidden", "value", "advantage_hidden", "advantage"}
    assert shapes["value_hidden"]["dense_0"]["kernel"] == (8, 16)
    assert shapes["advantage"]["kernel"] == (16, 3)
    with pytest.raises(ValueError, match="MLP.hidden_sizes must be positive ints"):
        q_network(BOX, spaces.Discrete(2), head_hidden_sizes=(0,))
    with pytest.raises(TypeError, match="q_network supports Discrete action spaces only"):
        q_network(BOX, spaces.Box(-1, 1, (2,)))


def test_sac_networks_continuous():
    # Eager only, to keep the file fast: the learner test below runs these networks under jit.
    model = sac_networks(BOX, spaces.Box(0.0, 4.0, (2,)), hidden_sizes=(8,), initial_alpha=0.2)
    obs = jax.random.normal(jax.random.key(0), (6, 4))
    params = init(model, obs, method="policy")
    p = params["params"]
    assert set(p) == {"actor", "critic", "temperature"}
    assert float(p["temperature"]["log_alpha"]) == pytest.approx(np.log(0.2))
    # Two stacked critics with different initial weights; the action joins the obs (4 + 2).
    kernel = p["critic"]["mlp"]["dense_0"]["kernel"]
    assert kernel.shape == (2, 6, 8) and not np.allclose(kernel[0], kernel[1])

    def step(params, obs, key):
        dist = make_distribution(model.distribution, model.apply(params, obs, method="policy"))
        action, log_prob = dist.sample_and_log_prob(key)
        q = model.apply(params, obs, action, method="q_values")
        return action, log_prob, q, model.apply(params, method="log_alpha")

    action, log_prob, q, log_alpha = step(params, obs, jax.random.key(2))
    assert action.shape == (6, 2) and bool(((action > 0) & (action < 4)).all())
    assert log_prob.shape == (6,) and q.shape == (2, 6) and log_alpha.shape == ()
    assert isinstance(make_distribution(model.distribution, jnp.zeros((6, 4))), TanhGaussian)
    labels = label_params(params, ["actor", "critic", "temperature"], None, "sac")
    assert labels["params"]["temperature"]["log_alpha"] == "temperature"
    with pytest.raises(ValueError, match="q_values needs an action"):
        model.apply(params, obs, method="q_values")


def test_sac_networks_discrete_and_init_through_any_method():
    model = sac_networks(spaces.Discrete(7), spaces.Discrete(3), hidden_sizes=(8,), num_critics=3)
    obs, action = jnp.asarray([0, 3, 6]), jnp.asarray([2, 0, 1])
    by_policy = init(model, obs, method="policy")
    by_q = abstract_init(model, obs, action, method="q_values")
    by_alpha = abstract_init(model, obs, method="log_alpha")
    assert shapes(by_policy) == by_q == by_alpha
    q_all = model.apply(by_policy, obs, method="q_values")
    assert q_all.shape == (3, 3, 3)  # [critics, batch, actions]
    q_taken = model.apply(by_policy, obs, action, method="q_values")
    np.testing.assert_allclose(q_taken, q_all[:, jnp.arange(3), action], rtol=1e-6)
    assert isinstance(make_distribution(model.distribution, jnp.zeros((3, 3))), Categorical)
    with pytest.raises(TypeError, match="sac_networks supports Box and Discrete action spaces"):
        sac_networks(BOX, spaces.MultiDiscrete([2, 2]))
    with pytest.raises(ValueError, match="num_critics must be a positive int; got 0"):
        sac_networks(BOX, spaces.Discrete(2), num_critics=0)


def test_sac_networks_train_with_one_optimizer_per_submodule():
    model = sac_networks(BOX, spaces.Box(-1.0, 1.0, (2,)), hidden_sizes=(8,))

    def loss(params, batch, ctx):
        # Toy terms: each optimizer follows its own loss, over its own submodule.
        q = ctx.apply(params, batch["obs"], batch["action"], method="q_values")
        dist_inputs = ctx.apply(params, batch["obs"], method="policy")
        log_alpha = ctx.apply(params, method="log_alpha")
        losses = {
            "critic": jnp.mean(q**2),
            "actor": jnp.mean(dist_inputs**2),
            "temperature": -log_alpha,
        }
        return losses, {}

    spec = jl.ModuleSpec(
        model,
        loss,
        optimizers={name: optax.sgd(0.1) for name in ("actor", "critic", "temperature")},
    )
    learner = jl.Learner({"sac": spec}, minibatch_size=8)
    rng = np.random.default_rng(0)
    batch = {
        "obs": rng.normal(size=(8, 4)).astype(np.float32),
        "action": rng.uniform(-1, 1, (8, 2)).astype(np.float32),
    }
    state = learner.init(jax.random.key(0), batch)
    new_state, _ = learner.update(state, batch)
    before, after = state.modules["sac"].params, new_state.modules["sac"].params
    # d(-log_alpha)/d(log_alpha) = -1; one SGD step of 0.1 raises log_alpha from 0 to 0.1.
    assert float(after["params"]["temperature"]["log_alpha"]) == pytest.approx(0.1)
    for name in ("actor", "critic"):
        changed = jax.tree.map(
            lambda a, b: not np.allclose(a, b), before["params"][name], after["params"][name]
        )
        assert any(jax.tree.leaves(changed)), name


def test_orthogonal_is_flaxs_initializer_key_for_key_batched_or_not(jit):
    flax_orthogonal = nn.initializers.orthogonal(2.0)
    init = orthogonal(2.0)
    keys = jax.random.split(jax.random.key(3), 4)
    one = maybe_jit(lambda key: init(key, (5, 7)), jit)(keys[0])
    np.testing.assert_array_equal(one, flax_orthogonal(keys[0], (5, 7)))
    # vmapped twice (agents x twin critics), each matrix is its key's: a lax.map, not a batch.
    nested = maybe_jit(jax.vmap(jax.vmap(lambda key: init(key, (3, 6)))), jit)(keys.reshape(2, 2))
    expected = np.stack([flax_orthogonal(key, (3, 6)) for key in keys]).reshape(2, 2, 3, 6)
    np.testing.assert_array_equal(nested, expected)


TWO_THREAD_INITS = """
import os, sys
os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])  # XLA's CPU pool: two threads
import flax.linen as nn
import jax
from jaxlearner.algorithms.networks.encoders import orthogonal
init = orthogonal(1.0) if sys.argv[1] == "ours" else nn.initializers.orthogonal(1.0)

@jax.jit
def four_twin_layers(key):  # independent, so XLA runs them at once
    twin = jax.vmap(lambda key: init(key, (64, 64)))
    return [twin(jax.random.split(k)) for k in jax.random.split(key, 4)]

for seed in range(50):
    jax.block_until_ready(four_twin_layers(jax.random.key(seed)))
print("initialised")
"""


def four_twin_layer_inits_end(which: str, timeout: float) -> bool:
    """Whether the script above ran its 50 inits within ``timeout`` seconds."""
    command = [sys.executable, "-c", TWO_THREAD_INITS, which]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    assert done.returncode == 0, done.stderr[-2000:]
    return "initialised" in done.stdout


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux CPU affinity and two CPUs",
)
def test_batched_orthogonal_inits_never_deadlock_a_two_thread_cpu_pool():
    """jaxlib 0.10's batched CPU QR waits on XLA's pool from inside it: flax's orthogonal
    init of four independent twin layers never returned on a two-thread pool (within 2 inits,
    3 tries of 3; SAC's twin critics hung ``jaxlearner train sac`` at its start 2 times in
    14 on this 2-core machine). ``encoders.orthogonal`` maps instead."""
    assert four_twin_layer_inits_end("ours", timeout=120), (
        "50 inits of four twin layers did not end within 120 s on a two-thread pool (deadlock)"
    )
