"""The target-network updates: today's four variants recorded by hand, over several calls.

Each variant is run over a short sequence of calls whose counters cross its
period, the params changing between calls, and compared with values derived
by hand (derivations in the comments). The ``extra`` entries, hyperparameters
and ``after`` each variant declares are recorded too: checkpoints on disk hold
them.
"""

import flax.linen as nn
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import maybe_jit, mse_loss, regression_batch, tree_equal

import jaxlearner as jl
from jaxlearner.algorithms.dqn import periodic_polyak_update
from jaxlearner.algorithms.sac import critic_polyak_update


def module_state(params, extra, hyperparams, grad_steps=0, env_steps=0):
    return jl.ModuleState(
        params=params,
        opt_states={},
        extra=extra,
        hyperparams=hyperparams,
        grad_steps=jnp.asarray(grad_steps, jnp.int32),
        env_steps=jnp.asarray(env_steps, jnp.int32),
    )


def run_calls(update, initial, hyperparams, calls, jit, counter="env_steps"):
    """Runs ``update.fn`` once per ``(count, w)``, params ``{"w": [w]}``; the extras after each.

    The target starts as a copy of ``{"w": [initial]}``.
    """
    extra = update.init_extra({"w": jnp.asarray([initial])})
    fn = maybe_jit(update.fn, jit)
    history = []
    for count, w in calls:
        state = module_state(
            {"w": jnp.asarray([w], jnp.float32)},
            extra,
            hyperparams,
            **{counter: count},
        )
        extra = fn(state, {}).extra
        history.append(extra)
    return history


# Calls (env_steps, w): the counter crosses a period of 100 at 100, 200 and 450.
CALLS = [(50, 2.0), (100, 4.0), (150, 6.0), (199, 8.0), (200, 10.0), (450, 12.0)]


def test_polyak_update_records(jit):
    update = jl.polyak_update(tau=0.1)
    assert update.after == "grad_step"
    assert dict(update.hyperparams) == {"tau": 0.1}
    init = update.init_extra({"w": jnp.asarray([1.0])})
    assert set(init) == {"target_params"}
    # Target starts at the params' copy 1.0; each call t <- 0.1 w + 0.9 t:
    # w=2: 0.2 + 0.9 = 1.1; w=4: 0.4 + 0.99 = 1.39; w=6: 0.6 + 1.251 = 1.851.
    history = run_calls(
        update,
        1.0,
        {"tau": jnp.asarray(0.1)},
        [(0, 2.0), (1, 4.0), (2, 6.0)],
        jit,
        counter="grad_steps",
    )
    targets = [float(extra["target_params"]["w"][0]) for extra in history]
    np.testing.assert_allclose(targets, [1.1, 1.39, 1.851], rtol=1e-6)
    assert all(set(extra) == {"target_params"} for extra in history)


def test_periodic_copy_records(jit):
    update = jl.periodic_copy(100)
    assert update.after == "update"
    assert dict(update.hyperparams) == {}
    init = update.init_extra({"w": jnp.asarray([1.0])})
    assert set(init) == {"target_params", "target_params_last_update"}
    assert init["target_params_last_update"].dtype == jnp.int32
    # Copy when env_steps - last >= 100: at 100 (w=4, last 100), 200 (w=10, last 200) and
    # 450 (w=12, last 450); 50, 150 and 199 keep the target (150 - 100, 199 - 100 < 100).
    history = run_calls(update, 1.0, {}, CALLS, jit)
    targets = [float(extra["target_params"]["w"][0]) for extra in history]
    lasts = [int(extra["target_params_last_update"]) for extra in history]
    assert targets == [1.0, 4.0, 4.0, 4.0, 10.0, 12.0]
    assert lasts == [0, 100, 100, 100, 200, 450]


def test_periodic_copy_counts_grad_steps_when_asked(jit):
    update = jl.periodic_copy(2, counter="grad_steps", target="hard")
    # Copy when grad_steps - last >= 2: at 2 (w=3) and 4 (w=5).
    history = run_calls(
        update,
        0.0,
        {},
        [(1, 2.0), (2, 3.0), (3, 4.0), (4, 5.0)],
        jit,
        counter="grad_steps",
    )
    assert [float(extra["hard"]["w"][0]) for extra in history] == [0.0, 3.0, 3.0, 5.0]
    assert [int(extra["hard_last_update"]) for extra in history] == [0, 2, 2, 4]


def test_dqn_periodic_polyak_update_records(jit):
    update = periodic_polyak_update(100, 0.5)
    assert update.after == "update"
    assert dict(update.hyperparams) == {"tau": 0.5}
    init = update.init_extra({"w": jnp.asarray([0.0])})
    assert set(init) == {"target_params", "target_params_last_update"}
    # Target starts at 0; when due (at 100, 200, 450), t <- 0.5 w + 0.5 t:
    # 100: 0.5 * 4 + 0 = 2; 200: 0.5 * 10 + 0.5 * 2 = 6; 450: 0.5 * 12 + 0.5 * 6 = 9.
    history = run_calls(update, 0.0, {"tau": jnp.asarray(0.5)}, CALLS, jit)
    targets = [float(extra["target_params"]["w"][0]) for extra in history]
    lasts = [int(extra["target_params_last_update"]) for extra in history]
    assert targets == [0.0, 2.0, 2.0, 2.0, 6.0, 9.0]
    assert lasts == [0, 100, 100, 100, 200, 450]


def sac_params(actor, critic):
    return {
        "params": {
            "actor": {"w": jnp.asarray([actor])},
            "critic": {"w": jnp.asarray([critic])},
            "log_alpha": jnp.asarray(0.0),
        }
    }


def test_sac_critic_polyak_update_records(jit):
    update = critic_polyak_update(0.5)
    assert update.after == "grad_step"
    assert dict(update.hyperparams) == {"tau": 0.5}
    init = update.init_extra(sac_params(7.0, 1.0))
    # Only the critic subtree has a target.
    assert set(init) == {"target_critic"}
    assert jax.tree.structure(init["target_critic"]) == jax.tree.structure({"w": 0})
    fn = maybe_jit(update.fn, jit)
    extra = init
    # t <- 0.5 critic + 0.5 t from 1: critic 3 -> 2; critic 6 -> 4; critic 0 -> 2.
    targets = []
    for step, critic in enumerate([3.0, 6.0, 0.0]):
        state = module_state(
            sac_params(-1.0, critic), extra, {"tau": jnp.asarray(0.5)}, grad_steps=step
        )
        new = fn(state, {})
        assert new.params["params"]["actor"]["w"][0] == -1.0
        extra = new.extra
        targets.append(float(extra["target_critic"]["w"][0]))
    assert targets == [2.0, 4.0, 2.0]
    assert set(extra) == {"target_critic"}


@pytest.mark.parametrize(
    ("tau", "target_network_update_freq", "expected"),
    [(1.0, 500, "copy"), (0.25, 5, "polyak")],
)
def test_dqn_module_declares_the_same_state(tau, target_network_update_freq, expected):
    learner = jl.algorithms.dqn(
        gymnasium.spaces.Box(-1.0, 1.0, (3,)),
        gymnasium.spaces.Discrete(2),
        {
            "tau": tau,
            "target_network_update_freq": target_network_update_freq,
            "hidden_sizes": (4,),
        },
    )
    module = learner.init(jax.random.key(0)).modules["default_policy"]
    assert set(module.extra) == {"target_params", "target_params_last_update"}
    # A hard copy declares no "tau"; a polyak step reads it from the state.
    assert ("tau" in module.hyperparams) == (expected == "polyak")


# The one mechanism, jl.target_update.


def test_target_update_polyak_every_call_matches_polyak_update(jit):
    update = jl.target_update(0.1)
    assert update.after == "grad_step"
    assert dict(update.hyperparams) == {"tau": 0.1}
    # As test_polyak_update_records: 1.1, 1.39, 1.851.
    history = run_calls(
        update, 1.0, {"tau": jnp.asarray(0.1)}, [(0, 2.0), (1, 4.0), (2, 6.0)], jit, "grad_steps"
    )
    targets = [float(extra["target_params"]["w"][0]) for extra in history]
    np.testing.assert_allclose(targets, [1.1, 1.39, 1.851], rtol=1e-6)


def test_target_update_tau_one_in_the_state_copies(jit):
    update = jl.target_update(1.0, period=100, counter="env_steps", after="update")
    # A traced tau of 1 copies: the same targets as periodic_copy(100).
    history = run_calls(update, 1.0, {"tau": jnp.asarray(1.0)}, CALLS, jit)
    assert [float(extra["target_params"]["w"][0]) for extra in history] == [
        1.0, 4.0, 4.0, 4.0, 10.0, 12.0,
    ]  # fmt: skip


def test_target_update_delayed_in_grad_steps_reads_tau_from_the_state(jit):
    # TD3's delayed targets: every 2 gradient steps, tau read from hyperparams["tau"] = 0.5
    # (not the 0.9 given, which is only the initial value).
    update = jl.target_update(0.9, period=2, counter="grad_steps")
    # From 0, due at grad steps 2 (w=4: t = 2) and 4 (w=8: t = 4 + 1 = 5); 1 and 3 keep it.
    history = run_calls(
        update,
        0.0,
        {"tau": jnp.asarray(0.5)},
        [(1, 2.0), (2, 4.0), (3, 6.0), (4, 8.0)],
        jit,
        counter="grad_steps",
    )
    assert [float(extra["target_params"]["w"][0]) for extra in history] == [0.0, 2.0, 2.0, 5.0]
    assert [int(extra["target_params_last_update"]) for extra in history] == [0, 2, 2, 4]


def test_target_update_with_a_selection_and_its_own_hyperparameter(jit):
    update = jl.target_update(
        0.25,
        target="target_critic",
        select=lambda params: params["params"]["critic"],
        hyperparam="critic_tau",
    )
    assert dict(update.hyperparams) == {"critic_tau": 0.25}
    params = sac_params(7.0, 4.0)
    extra = update.init_extra(params)
    assert set(extra) == {"target_critic"}
    state = module_state(
        sac_params(7.0, 8.0), {"target_critic": {"w": jnp.asarray([0.0])}}, {"critic_tau": 0.25}
    )
    new = maybe_jit(update.fn, jit)(state, {})
    # 0.25 * 8 + 0.75 * 0 = 2; the actor has no target and the params are untouched.
    assert float(new.extra["target_critic"]["w"][0]) == 2.0
    assert set(new.extra) == {"target_critic"}
    assert float(new.params["params"]["critic"]["w"][0]) == 8.0


def test_target_update_vmaps_over_tau(jit):
    update = jl.target_update(0.5)
    state = module_state(
        {"w": jnp.asarray([4.0])}, {"target_params": {"w": jnp.asarray([0.0])}}, {}
    )

    def target_for(tau):
        return update.fn(state.replace(hyperparams={"tau": tau}), {}).extra["target_params"]["w"]

    taus = jnp.asarray([0.0, 0.25, 0.5, 1.0])
    # tau * 4 + (1 - tau) * 0, one per tau: one compiled function for the sweep.
    swept = maybe_jit(jax.vmap(target_for), jit)(taus)
    np.testing.assert_allclose(swept[:, 0], [0.0, 1.0, 2.0, 4.0])


def test_target_update_with_a_scheduled_tau_inside_the_learner():
    # An optax schedule over grad_steps, refreshed before each step: tau is 1 at the first
    # gradient step (count 0) and 0 from the second on. The target is the params after
    # step 1, then stays there while the params move on (4 steps of 16 rows).
    update = jl.target_update(optax.piecewise_constant_schedule(1.0, {1: 0.0}))
    spec = jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.05), additional_updates=[update])
    learner = jl.Learner({"m": spec}, minibatch_size=16, shuffle=False)
    batch = regression_batch()
    state = learner.init(jax.random.key(0), batch)
    assert float(state.modules["m"].hyperparams["tau"]) == 1.0
    first_rows = jax.tree.map(lambda x: x[:16], batch)
    after_first, _ = learner.update(learner.init(jax.random.key(0), first_rows), first_rows)
    state, metrics = learner.update(state, batch)
    module = state.modules["m"]
    assert tree_equal(module.extra["target_params"], after_first.modules["m"].params)
    assert not tree_equal(module.extra["target_params"], module.params)
    assert float(metrics["m"]["hyperparams/tau"]) == 0.0


def test_target_update_with_a_piecewise_tau_over_env_steps():
    # RLlib's list, over env steps: tau 1 in the first update (env_steps 0), so the target
    # follows the params; 0 in the second (env_steps 64), so it stays put.
    update = jl.target_update([[0, 1.0], [64, 0.0]], after="update")
    spec = jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.05), additional_updates=[update])
    learner = jl.Learner({"m": spec}, minibatch_size=32, shuffle=False)
    batch = regression_batch()
    state1, _ = learner.update(learner.init(jax.random.key(0), batch), batch)
    assert tree_equal(state1.modules["m"].extra["target_params"], state1.modules["m"].params)
    state2, _ = learner.update(state1, batch)
    assert tree_equal(state2.modules["m"].extra["target_params"], state1.modules["m"].params)
    assert float(state2.modules["m"].hyperparams["tau"]) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"tau": 1.5}, ValueError, r"tau must lie in \[0, 1\]; got 1.5"),
        ({"tau": 0.5, "period": 0}, ValueError, "period must be a positive int or None; got 0"),
        ({"tau": 0.5, "period": True}, ValueError, "period must be a positive int"),
        ({"tau": 0.5, "counter": "updates"}, ValueError, "counter must be one of"),
        ({"tau": 0.5, "after": "epoch"}, ValueError, "after must be one of"),
        ({"tau": 0.5, "select": "critic"}, TypeError, "select must be a callable"),
        ({"tau": 0.5, "target": ""}, TypeError, "target must be a non-empty str"),
        ({"tau": 0.5, "hyperparam": 3}, TypeError, "hyperparam must be a non-empty str or None"),
        ({"tau": [[0, 1.0]], "hyperparam": None}, TypeError, "needs a constant tau"),
        ({"tau": "fast"}, (TypeError, ValueError), "tau"),
    ],
)
def test_target_update_refuses_bad_arguments(kwargs, error, match):
    tau = kwargs.pop("tau")
    with pytest.raises(error, match=match):
        jl.target_update(tau, **kwargs)
