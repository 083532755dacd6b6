"""The library's bad input: refused in Python with what was received and what was expected.

A state from a learner with other optimizers (it used to fail inside optax, or run on
with the other optimizer's state), a negative learning rate, a checkpoint directory that
is a file, gradients that do not fit the params; and a batch of Python lists, which is
converted rather than refused.
"""

import flax.linen as nn
import jax
import numpy as np
import optax
import pytest
from helpers import ActorCritic, actor_critic_loss, mse_loss, regression_batch, tree_equal

import jaxlearner as jl
from jaxlearner.algorithms.ppo import PPOConfig
from jaxlearner.algorithms.sac import SACConfig


def counting(loss, traces):
    def traced(params, batch, ctx):
        traces.append(1)
        return loss(params, batch, ctx)

    return traced


def learner_with(optimizer, traces=None, **options):
    loss = mse_loss if traces is None else counting(mse_loss, traces)
    spec = jl.ModuleSpec(nn.Dense(1), loss, optimizer)
    return jl.Learner({"policy": spec}, sample_batch=regression_batch(), **options)


@pytest.mark.parametrize(
    ("made_by", "used_by", "held", "expected"),
    [
        (optax.adam, optax.sgd, "(ScaleByAdamState, EmptyState)", "(EmptyState, EmptyState)"),
        (optax.sgd, optax.adam, "(EmptyState, EmptyState)", "(ScaleByAdamState, EmptyState)"),
    ],
    ids=["adam-state-to-sgd", "sgd-state-to-adam"],
)
def test_a_state_of_other_optimizers_is_refused_naming_module_and_optimizer(
    made_by, used_by, held, expected
):
    state = learner_with(optax.inject_hyperparams(made_by)(learning_rate=0.1)).init(
        jax.random.key(0)
    )
    traces = []
    learner = learner_with(jl.Optimizer(used_by, learning_rate=0.1), traces)
    traces.clear()
    wanted = "Module 'policy', optimizer 'default': the state holds an optimizer state"
    for call in (
        lambda: learner.update(state, regression_batch()),
        lambda: learner.apply_gradients(state, {"policy": state.modules["policy"].params}),
        lambda: learner.compute_gradients(state, regression_batch()),
    ):
        with pytest.raises(ValueError, match=wanted) as refused:
            call()
        message = str(refused.value)
        assert f"of the form InjectStatefulHyperparamsState({held})" in message
        assert f"optimizer 'default' ({used_by.__name__}) keeps" in message
        assert f"InjectStatefulHyperparamsState({expected})" in message
    assert traces == []  # refused in Python, before anything was traced


def test_a_state_with_other_optimizer_names_is_refused():
    state = learner_with(optax.adam(1e-3)).init(jax.random.key(0))
    spec = jl.ModuleSpec(
        ActorCritic(),
        actor_critic_loss,
        optimizers={"actor": optax.adam(1e-3), "critic": optax.sgd(0.1)},
    )
    learner = jl.Learner({"policy": spec}, sample_batch=regression_batch())
    message = (
        r"Module 'policy': the state holds optimizer state\(s\) for \['default'\], but this "
        r"learner's module has the optimizer\(s\) \['actor', 'critic'\]"
    )
    with pytest.raises(ValueError, match=message):
        learner.update(state, regression_batch())


@pytest.mark.parametrize(
    ("rate", "reaches"),
    [
        (-1e-3, "got -0.001."),
        ([[0, 1e-3], [1000, -1e-4]], "got [[0, 0.001], [1000, -0.0001]], which reaches -0.0001."),
        (optax.linear_schedule(-1e-3, 0.0, 100), "which starts at -0.001"),
    ],
    ids=["constant", "piecewise", "optax-schedule"],
)
def test_a_negative_learning_rate_is_refused_naming_the_optimizer(rate, reaches):
    with pytest.raises(ValueError, match=r"Optimizer\(adam\): learning_rate must be >= 0") as error:
        jl.Optimizer(optax.adam, learning_rate=rate)
    assert reaches in str(error.value)
    assert "a negative rate climbs the loss" in str(error.value)
    jl.Optimizer(optax.adam, learning_rate=0.0)  # a frozen module is fine


def test_a_negative_learning_rate_in_an_algorithm_config_names_the_field():
    with pytest.raises(ValueError, match=r"SACConfig.critic_lr must be >= 0 .*got -0.0003"):
        SACConfig(critic_lr=-3e-4)
    with pytest.raises(ValueError, match=r"PPOConfig.lr must be >= 0 .*which reaches -1e-05"):
        PPOConfig(lr=[[0, 1e-4], [1000, -1e-5]])


def test_a_checkpoint_manager_on_a_file_is_refused_when_built(tmp_path):
    file = tmp_path / "notes.txt"
    file.write_text("mine\n")
    with pytest.raises(NotADirectoryError, match=rf"{file} is a file\. Pass a folder's path"):
        jl.CheckpointManager(file)
    with pytest.raises(NotADirectoryError, match=rf"{file / 'run'} lies under the file {file}"):
        jl.CheckpointManager(file / "run", read_only=True)
    assert file.read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def as_lists(batch):
    return {key: value.tolist() for key, value in batch.items()}


def test_a_batch_of_python_lists_is_converted_like_arrays():
    batch = regression_batch()
    learner = learner_with(optax.adam(1e-2), minibatch_size=16)
    state = learner.init(jax.random.key(0))
    from_arrays, _ = learner.update(state, batch)
    from_lists, _ = learner.update(state, as_lists(batch))
    assert tree_equal(from_arrays, from_lists)
    grads, _ = learner.compute_gradients(state, as_lists(batch))
    assert tree_equal(grads, learner.compute_gradients(state, batch)[0])
    # A learner built from a sample batch of lists has float32 layouts, as JAX makes them.
    spec = jl.ModuleSpec(nn.Dense(1), mse_loss, optax.adam(1e-2))
    listed = jl.Learner({"policy": spec}, sample_batch=as_lists(batch))
    assert listed.batch_layout["policy"]["x"].dtype == np.float32
    assert tree_equal(listed.init(jax.random.key(0)), learner.init(jax.random.key(0)))


def test_a_ragged_list_is_refused_naming_its_key():
    learner = learner_with(optax.adam(1e-2))
    state = learner.init(jax.random.key(0))
    batch = {"x": [[1.0, 2.0, 3.0], [1.0, 2.0]], "y": [0.0, 1.0]}
    with pytest.raises(ValueError, match=r"Module 'policy', batch key \['x'\]: got a list of "):
        learner.update(state, batch)


def test_gradients_that_do_not_fit_the_params_are_refused_naming_the_leaf():
    learner = learner_with(optax.adam(1e-2))
    state = learner.init(jax.random.key(0))
    grads, _ = learner.compute_gradients(state, regression_batch())
    wrong = jax.tree.map(lambda g: g, grads)
    wrong["policy"]["params"]["kernel"] = np.zeros((4, 1), np.float32)
    with pytest.raises(
        ValueError, match=r"gradient \['params'\]\['kernel'\]: expected shape \(3, 1\)"
    ):
        learner.apply_gradients(state, wrong)
    with pytest.raises(KeyError, match=r"unknown module 'critic'; the learner's modules are"):
        learner.postprocess_gradients(state, {"critic": grads["policy"]})
    with pytest.raises(TypeError, match=r"Gradients must be \{module_id: grads\}"):
        learner.apply_gradients(state, [grads["policy"]])
    missing = {"policy": {"params": {"bias": grads["policy"]["params"]["bias"]}}}
    with pytest.raises(ValueError, match=r"Missing: \[\"\['params'\]\['kernel'\]\"\]"):
        learner.apply_gradients(state, missing)
