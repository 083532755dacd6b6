"""The target-network updates: today's four variants recorded by hand, over several calls.

Each variant is run over a short sequence of calls whose counters cross its
period, the params changing between calls, and compared with values derived
by hand (derivations in the comments). The ``extra`` entries, hyperparameters
and ``after`` each variant declares are recorded too: checkpoints on disk hold
them.
"""

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import maybe_jit

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
