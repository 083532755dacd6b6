"""Anakin (pure-JAX PPO on CartPole in one compiled call) against its peers.

Run: ``python benchmarks/bench_anakin.py [--seeds 1 8 32] [--chunk 5]`` for the
run to 475 against the gymnasium Trainer (``results/bench_anakin.json``), and
``python benchmarks/bench_anakin.py --peer [--peer-seeds 1 8] [--repeats 3]``
for the comparison with a purejaxrl-style fused reference
(``results/bench_anakin_peer.json``). Each prints the markdown table for
``benchmarks/README.md``.

The peer comparison (``--peer``): ``jaxlearner.anakin.make_train`` and the
fused reference of ``fused_ppo.py`` (purejaxrl's ``make_train`` written here),
both at purejaxrl's default CartPole config (``fused_ppo.PURE_JAX_RL``: 4 envs
x 128 steps, 4 epochs x 4 minibatches, 976 updates, 499,712 env steps), all
``jax.jit(jax.vmap(train))`` over the seeds; anakin with its one evaluation
(after the last iteration) and with ``evaluate=False`` (as the reference, none).
Each is lowered and compiled apart (``jax.jit(f).lower(keys)``, then
``.compile()``, both timed), then the compiled calls run interleaved, A, B, C,
A, B, C, ... (one untimed warm-up call each first); env steps per second are
over the median call.

The run to 475: both paths train PPO with the same config (the one of the CI
learning test) on 16 environments per agent, evaluate the deterministic policy every
``chunk`` x 1024 env steps (the first episode of 16 fresh environments) and
stop once every agent has reached a mean evaluation return of 475:

* Anakin: ``jax.jit(jax.vmap(run))`` over the seeds, ``run`` being ``chunk``
  iterations and one evaluation; the loop calls it until every seed has
  reached 475 at some evaluation. Compile time is reported apart.
* Trainer: ``jl.Trainer`` on gymnasium's ``CartPole-v1`` (a ``SyncVectorEnv``
  of 16), one seed, ``run([RewardBound(475)], steps_per_eval=...)``; its
  wall time includes the update's compilation on the first step (a few
  seconds).

Env steps per second count the training steps of all agents (not the
evaluation steps): for Anakin over the wall time of the loop to 475 (compiled,
evaluations included); for the Trainer over 10 further iterations after it
reached 475 (compiled, no evaluation).
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import statistics
import sys
import time
from collections.abc import Callable

import gymnasium as gym
import jax
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import fused_ppo
from ppo_workload import compile_stats, machine, write_results

import jaxlearner as jl
from jaxlearner import anakin
from jaxlearner.anakin import envs

THRESHOLD = 475.0
NUM_ENVS = 16
MAX_ITERATIONS = 400  # the learning rate reaches 0 at 400 x 1024 env steps
PPO = {
    "lr": [[0, 1e-3], [409_600, 0.0]],
    "train_batch_size": 1024,
    "minibatch_size": 256,
    "num_epochs": 8,
    "hidden_sizes": (64, 64),
    "lambda_": 0.95,
    "clip_param": 0.2,
    "vf_clip_param": 10_000.0,
    "grad_clip": 0.5,
}


def bench_anakin(num_seeds: int, chunk: int) -> dict:
    env = envs.make("CartPole-v1")
    algorithm = jl.algorithms.build("ppo", env.observation_space, env.action_space, PPO)
    config = anakin.AnakinConfig(
        num_envs=NUM_ENVS, num_iterations=chunk, eval_interval=chunk, eval_envs=16
    )
    functions = anakin.make_anakin(algorithm, env, config)
    keys = jax.random.split(jax.random.key(0), num_seeds)
    start = time.perf_counter()
    init = jax.jit(jax.vmap(functions.init)).lower(keys).compile()
    state = init(keys)
    run = jax.jit(jax.vmap(functions.run), donate_argnums=0).lower(state).compile()
    compile_s = time.perf_counter() - start
    reached = np.zeros(num_seeds, bool)
    steps_to_threshold = np.full(num_seeds, np.nan)
    start = time.perf_counter()
    iterations = 0
    while iterations < MAX_ITERATIONS and not reached.all():
        state, metrics = run(state)
        iterations += chunk
        returns = np.asarray(metrics["eval/return_mean"][:, -1])
        steps = float(metrics["eval/env_steps"][0, -1])
        steps_to_threshold[~reached & (returns >= THRESHOLD)] = steps
        reached |= returns >= THRESHOLD
    seconds = time.perf_counter() - start
    env_steps = iterations * algorithm.config.train_batch_size
    return {
        "path": f"Anakin, {num_seeds} seed{'s' if num_seeds > 1 else ''}",
        "seeds": num_seeds,
        "compile_s": compile_s,
        "wall_s": seconds,
        "reached": int(reached.sum()),
        "env_steps_per_seed": env_steps,
        "median_steps_to_threshold": float(np.nanmedian(steps_to_threshold))
        if reached.any()
        else None,
        "env_steps_per_s": num_seeds * env_steps / seconds,  # compiled; evaluations included
        "final_returns": returns.tolist(),
    }


def bench_trainer(chunk: int) -> dict:
    probe = gym.make("CartPole-v1")
    learner = jl.algorithms.ppo(probe.observation_space, probe.action_space, PPO)
    trainer = jl.Trainer(
        learner, "CartPole-v1", num_envs=NUM_ENVS, eval_episodes=16, seed=0, progress=False
    )
    start = time.perf_counter()
    history = trainer.run(
        [jl.RewardBound(THRESHOLD)],
        steps_per_eval=chunk * PPO["train_batch_size"],
        max_iterations=MAX_ITERATIONS,
    )
    seconds = time.perf_counter() - start
    # Throughput once compiled: 10 more iterations, without evaluation.
    steady_start, steady_steps = time.perf_counter(), trainer.counters.env_steps
    for _ in range(10):
        trainer.step()
    steady = (trainer.counters.env_steps - steady_steps) / (time.perf_counter() - steady_start)
    trainer.close()
    evaluations = [h["eval/return_mean"] for h in history if "eval/return_mean" in h]
    reached = bool(evaluations) and evaluations[-1] >= THRESHOLD
    env_steps = int(history[-1]["env_steps"])
    return {
        "path": "Trainer (gymnasium), 1 seed",
        "seeds": 1,
        "compile_s": None,
        "wall_s": seconds,
        "reached": int(reached),
        "env_steps_per_seed": env_steps,
        "median_steps_to_threshold": float(env_steps) if reached else None,
        "env_steps_per_s": steady,
        "final_returns": evaluations[-1:],
    }


def peer_ppo_config(reference: fused_ppo.FusedPPOConfig) -> dict:
    """jaxlearner's PPO fields for the reference's config.

    The same shapes, schedule and coefficients; what PPO cannot express the
    same way stays jaxlearner's: Adam's eps (optax's 1e-8, not 1e-5), the
    value loss (the squared error, here unclipped: RLlib's clip of it at 10
    stalls the value function on CartPole's returns; purejaxrl clips the
    value's change instead), advantages standardized over the train batch
    (not per minibatch), and GAE that bootstraps on truncation.
    """
    steps = reference.num_updates * reference.num_envs * reference.num_steps
    return {
        "lr": [[0, reference.lr], [steps, 0.0]],
        "gamma": reference.gamma,
        "lambda_": reference.gae_lambda,
        "clip_param": reference.clip_eps,
        "vf_clip_param": 10_000.0,
        "vf_loss_coeff": reference.vf_coef,
        "entropy_coeff": reference.ent_coef,
        "use_kl_loss": False,
        "grad_clip": reference.max_grad_norm,
        "train_batch_size": reference.num_envs * reference.num_steps,
        "minibatch_size": reference.minibatch_size,
        "num_epochs": reference.update_epochs,
        "hidden_sizes": (reference.hidden, reference.hidden),
        "activation": "tanh",
    }


def peer_trains(reference: fused_ppo.FusedPPOConfig) -> dict[str, Callable]:
    """``{name: train(key)}`` for the comparison: jaxlearner's anakin and the reference."""
    env = envs.make("CartPole-v1")
    algorithm = jl.algorithms.build(
        "ppo", env.observation_space, env.action_space, peer_ppo_config(reference)
    )
    # By default one evaluation (16 episodes, after the last iteration) is part of the program;
    # the reference has none, so anakin runs with and without it.
    config = anakin.AnakinConfig(num_envs=reference.num_envs, num_iterations=reference.num_updates)
    return {
        "jaxlearner anakin": anakin.make_train(algorithm, env, config),
        "jaxlearner anakin, evaluate=False": anakin.make_train(
            algorithm, env, dataclasses.replace(config, evaluate=False)
        ),
        "fused reference (purejaxrl-style)": fused_ppo.make_train(reference, env),
    }


def final_return(metrics: dict) -> float:
    """Median over seeds of the mean return of episodes ended in the last 10 updates."""
    returns = np.asarray(metrics["episode_return_mean"])[:, -10:]
    return float(np.nanmedian(np.nanmean(returns, axis=1)))


def bench_peer(
    num_seeds: int, repeats: int, compile_repeats: int, reference: fused_ppo.FusedPPOConfig
) -> list[dict]:
    keys = jax.random.split(jax.random.key(0), num_seeds)
    trains = peer_trains(reference)
    compiled, stages = {}, {name: [] for name in trains}
    for _ in range(compile_repeats):  # interleaved too: A, B, C, A, B, C, ...
        for name, train in trains.items():
            compiled[name], stats = compile_stats(jax.vmap(train), keys)
            stages[name].append(stats)
    stats = {
        name: {
            **runs[0],
            "lower_s": statistics.median(r["lower_s"] for r in runs),
            "compile_s": statistics.median(r["compile_s"] for r in runs),
            "lower_and_compile_s": [r["lower_s"] + r["compile_s"] for r in runs],
        }
        for name, runs in stages.items()
    }
    if repeats == 0:
        return [{"variant": name, "seeds": num_seeds, **stats[name]} for name in trains]
    returns = {}
    for name, call in compiled.items():  # a warm-up call each, untimed
        returns[name] = final_return(jax.block_until_ready(call(keys))[1])
    times = {name: [] for name in compiled}
    for _ in range(repeats):
        for name, call in compiled.items():
            start = time.perf_counter()
            jax.block_until_ready(call(keys))
            times[name].append(time.perf_counter() - start)
    env_steps = num_seeds * reference.num_updates * reference.num_envs * reference.num_steps
    results = []
    for name in compiled:
        median = statistics.median(times[name])
        results.append(
            {
                "variant": name,
                "seeds": num_seeds,
                **stats[name],
                "median_s": median,
                "times_s": times[name],
                "env_steps": env_steps,
                "env_steps_per_s": env_steps / median,
                "final_return": returns[name],
            }
        )
    return results


def main_peer(args: argparse.Namespace) -> None:
    reference = dataclasses.replace(fused_ppo.PURE_JAX_RL, total_timesteps=args.total_timesteps)
    results = [
        r
        for seeds in args.peer_seeds
        for r in bench_peer(seeds, args.repeats, args.compile_repeats, reference)
    ]
    report = {
        "workload": (
            f"PPO on pure-JAX CartPole-v1 at purejaxrl's default config: {reference.num_envs} "
            f"envs x {reference.num_steps} steps, {reference.update_epochs} epochs x "
            f"{reference.num_minibatches} minibatches, {reference.num_updates} updates; "
            f"jax.jit(jax.vmap(train)) over seeds; median of {args.repeats} interleaved calls "
            f"and of {args.compile_repeats} interleaved lowerings and compilations"
        ),
        "machine": machine(),
        "results": results,
    }
    write_results("bench_anakin_peer" if args.repeats else "bench_anakin_peer_compile", report)
    print(f"machine: {report['machine']}")
    print(
        "| variant | seeds | lower (s) | compile (s) | StableHLO (kchars) | HLO instructions | "
        "median call (s) | env steps/s | return, last 10 updates |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        timed = r.get("median_s") is not None
        print(
            f"| {r['variant']} | {r['seeds']} | {r['lower_s']:.2f} | {r['compile_s']:.2f} | "
            f"{r['stablehlo_chars'] / 1000:.0f} | {r['hlo_instructions']:,} | "
            + (
                f"{r['median_s']:.2f} | {r['env_steps_per_s']:,.0f} | {r['final_return']:.0f} |"
                if timed
                else "- | - | - |"
            )
        )
    print()
    for seeds in args.peer_seeds:
        *ours, theirs = (r for r in results if r["seeds"] == seeds)
        for r in ours:
            compile_ratio = (r["lower_s"] + r["compile_s"]) / (
                theirs["lower_s"] + theirs["compile_s"]
            )
            speed = (
                f"{r['env_steps_per_s'] / theirs['env_steps_per_s']:.2f}"
                if "env_steps_per_s" in r
                else "-"
            )
            print(
                f"{seeds} seed(s), {r['variant']}: env steps/s ratio {speed} (goal >= 1.2); "
                f"lower + compile ratio {compile_ratio:.2f} (goal <= 1.5; medians of "
                f"{len(r['lower_and_compile_s'])})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--chunk", type=int, default=5, help="iterations between evaluations")
    parser.add_argument("--skip-trainer", action="store_true")
    parser.add_argument(
        "--peer", action="store_true", help="compare with the purejaxrl-style fused reference"
    )
    parser.add_argument("--peer-seeds", type=int, nargs="+", default=[1, 8])
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed calls per variant (--peer); 0: none"
    )
    parser.add_argument(
        "--compile-repeats", type=int, default=1, help="lowerings and compilations per variant"
    )
    parser.add_argument(
        "--total-timesteps", type=int, default=fused_ppo.PURE_JAX_RL.total_timesteps
    )
    args = parser.parse_args()
    if args.peer:
        main_peer(args)
        return
    results = [bench_anakin(seeds, args.chunk) for seeds in args.seeds]
    if not args.skip_trainer:
        results.append(bench_trainer(args.chunk))
    report = {
        "workload": (
            f"PPO on CartPole-v1, {NUM_ENVS} envs per agent, 1024 env steps and 8 epochs x 4 "
            f"minibatches per iteration, evaluation every {args.chunk * 1024} env steps, "
            f"stop when every agent reached {THRESHOLD:g}"
        ),
        "machine": machine(),
        "results": results,
    }
    write_results("bench_anakin", report)
    print(f"machine: {report['machine']}")
    print(
        "| path | seeds reaching 475 | compile (s) | wall time to 475, all seeds (s) | "
        "env steps per seed | median env steps to 475 | env steps/s (all seeds) |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        compile_s = "-" if r["compile_s"] is None else f"{r['compile_s']:.0f}"
        median = r["median_steps_to_threshold"]
        print(
            f"| {r['path']} | {r['reached']}/{r['seeds']} | {compile_s} | {r['wall_s']:.1f} | "
            f"{r['env_steps_per_seed']:,} | {'-' if median is None else f'{median:,.0f}'} | "
            f"{r['env_steps_per_s']:,.0f} |"
        )


if __name__ == "__main__":
    main()
