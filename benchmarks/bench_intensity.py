"""Off-policy training at one gradient update per env step: env steps per second.

Run: ``python benchmarks/bench_intensity.py [--steps 2000] [--repeats 3]
[--fragments 1 8 32] [--no-sbx]``. Writes ``benchmarks/results/bench_intensity.json`` and
prints a markdown table.

Each row trains one environment (``num_envs=1``) with the :class:`jaxlearner.Trainer`
at one update per env step (``training_intensity = train_batch_size``) and rollout
fragments of 1, 8 or 32 env steps (an iteration collects the fragment, then runs as
many updates in one compiled call), and times ``--steps`` env steps after a warm-up
that compiles everything and fills the buffer past ``learning_starts``:

* SAC on Pendulum-v1 with RL Zoo's settings (lr 1e-3, batch 256, 256x256 actor and
  critics, learning from step 100) and with the command line's network and batch
  (``jaxlearner train sac``: 64x64, batch 128), at one environment here;
* DQN on CartPole-v1 with RL Zoo's network and batch (256x256, batch 64), at one update
  per env step (RL Zoo's own CartPole DQN runs 0.5).

With ``sbx`` installed (``pip install sbx-rl``), the same settings run through sbx's SAC
and DQN (``train_freq=1, gradient_steps=1``), timed the same way, interleaved with ours
in each repeat so that both see the same machine load. The median over repeats is
reported.

``--solve`` times DQN on CartPole-v1 to an evaluation return of 475 instead: the
command line's settings (``jaxlearner train dqn``) through the Trainer, and sbx's DQN with RL Zoo's
CartPole hyperparameters, each from construction (compilation included) to the first
evaluation (10 deterministic episodes every 2560 env steps) that reaches 475, seeds
interleaved, in one process.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import statistics
import time

import gymnasium as gym
import jax

import jaxlearner as jl

WARMUP_STEPS = 256

SAC_ZOO = {
    "actor_lr": 1e-3,
    "critic_lr": 1e-3,
    "alpha_lr": 1e-3,
    "train_batch_size": 256,
    "hidden_sizes": (256, 256),
    "num_steps_sampled_before_learning_starts": 100,
}
DQN_ZOO = {
    "lr": 2.3e-3,
    "train_batch_size": 64,
    "hidden_sizes": (256, 256),
    "dueling": False,
    "double_q": False,
    "num_steps_sampled_before_learning_starts": 100,
}


def workloads() -> list[tuple[str, str, str, dict]]:
    """``(name, algorithm, env, config)`` rows; the command line's SAC settings included."""
    from jaxlearner.cli import DEFAULTS

    cli_sac = {**DEFAULTS["sac"].config, "num_steps_sampled_before_learning_starts": 100}
    return [
        ("sac, RL Zoo (256x256, batch 256)", "sac", "Pendulum-v1", SAC_ZOO),
        ("sac, jaxlearner train sac", "sac", "Pendulum-v1", cli_sac),
        ("dqn, RL Zoo (256x256, batch 64)", "dqn", "CartPole-v1", DQN_ZOO),
    ]


def ours(algorithm: str, env_id: str, config: dict, fragment: int, steps: int) -> float:
    """Env steps per second of the Trainer at one update per env step."""
    config = {
        **config,
        "rollout_fragment_length": fragment,
        "training_intensity": float(config["train_batch_size"]),
    }
    env = gym.make(env_id)
    built = jl.algorithms.build(algorithm, env.observation_space, env.action_space, config)
    trainer = jl.Trainer(built, env_id, num_envs=1, seed=0, progress=False)
    try:
        while trainer.counters.env_steps < WARMUP_STEPS:
            trainer.step()
        jax.block_until_ready(trainer.state)
        start, before = time.perf_counter(), trainer.counters.env_steps
        while trainer.counters.env_steps - before < steps:
            trainer.step()
        jax.block_until_ready(trainer.state)
        return (trainer.counters.env_steps - before) / (time.perf_counter() - start)
    finally:
        trainer.close()


def sbx_model(algorithm: str, env_id: str, config: dict):
    """sbx's SAC or DQN with the same settings, one update per env step."""
    import sbx

    hidden = list(config["hidden_sizes"])
    common = {
        "train_freq": 1,
        "gradient_steps": 1,
        "batch_size": config["train_batch_size"],
        "learning_starts": 100,
        "policy_kwargs": {"net_arch": hidden},
        "seed": 0,
        "verbose": 0,
    }
    if algorithm == "sac":
        return sbx.SAC("MlpPolicy", env_id, learning_rate=config["actor_lr"], **common)
    return sbx.DQN("MlpPolicy", env_id, learning_rate=config["lr"], **common)


def theirs(algorithm: str, env_id: str, config: dict, steps: int) -> float:
    """sbx's env steps per second, timed after the same warm-up."""
    model = sbx_model(algorithm, env_id, config)
    model.learn(WARMUP_STEPS)
    start = time.perf_counter()
    model.learn(steps, reset_num_timesteps=False)
    return steps / (time.perf_counter() - start)


EVAL_EVERY = 2560
SOLVED = 475.0


def ours_to_solve(seed: int, max_steps: int) -> tuple[float, int]:
    """Seconds and env steps from building the command line's DQN to its first eval >= 475."""
    from jaxlearner.cli import DEFAULTS

    start = time.perf_counter()
    defaults = DEFAULTS["dqn"]
    env = gym.make(defaults.env)
    built = jl.algorithms.build("dqn", env.observation_space, env.action_space, defaults.config)
    trainer = jl.Trainer(built, defaults.env, num_envs=defaults.num_envs, seed=seed)
    try:
        trainer.run([jl.RewardBound(SOLVED), jl.MaxEnvSteps(max_steps)], steps_per_eval=EVAL_EVERY)
    finally:
        trainer.close()
    return time.perf_counter() - start, trainer.counters.env_steps


def theirs_to_solve(seed: int, max_steps: int) -> tuple[float, int]:
    """The same for sbx's DQN with RL Zoo's CartPole-v1 hyperparameters."""
    import sbx
    from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold

    start = time.perf_counter()
    model = sbx.DQN(
        "MlpPolicy",
        "CartPole-v1",
        learning_rate=2.3e-3,
        batch_size=64,
        buffer_size=100_000,
        learning_starts=1000,
        gamma=0.99,
        target_update_interval=10,
        train_freq=256,
        gradient_steps=128,
        exploration_fraction=0.16,
        exploration_final_eps=0.04,
        policy_kwargs={"net_arch": [256, 256]},
        seed=seed,
        verbose=0,
    )
    stop = StopTrainingOnRewardThreshold(SOLVED, verbose=0)
    callback = EvalCallback(
        gym.make("CartPole-v1"),
        callback_on_new_best=stop,
        n_eval_episodes=10,
        eval_freq=EVAL_EVERY,
        deterministic=True,
        verbose=0,
    )
    model.learn(max_steps, callback=callback)
    return time.perf_counter() - start, model.num_timesteps


def solve(seeds: list[int], max_steps: int) -> None:
    """Prints and saves the time to 475 of both, per seed and the medians."""
    runs: dict[str, list[tuple[float, int]]] = {"jaxlearner": [], "sbx": []}
    for seed in seeds:
        runs["jaxlearner"].append(ours_to_solve(seed, max_steps))
        runs["sbx"].append(theirs_to_solve(seed, max_steps))
        print(seed, {name: values[-1] for name, values in runs.items()}, flush=True)
    medians = {
        name: {
            "seconds": statistics.median(s for s, _ in values),
            "env_steps": statistics.median(n for _, n in values),
            "runs": values,
        }
        for name, values in runs.items()
    }
    medians["ratio_seconds"] = medians["jaxlearner"]["seconds"] / medians["sbx"]["seconds"]
    out = pathlib.Path(__file__).resolve().parent / "results" / "bench_intensity_solve.json"
    out.write_text(json.dumps(medians, indent=2) + "\n")
    print(json.dumps(medians, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fragments", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--no-sbx", action="store_true")
    parser.add_argument("--only", help="run only workloads whose name contains this")
    parser.add_argument("--solve", action="store_true", help="DQN CartPole to 475 instead")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-steps", type=int, default=50_000)
    args = parser.parse_args()
    if args.solve:
        solve(args.seeds, args.max_steps)
        return
    use_sbx = not args.no_sbx
    if use_sbx:
        try:
            import sbx  # noqa: F401
        except ImportError:
            use_sbx = False
    rows = []
    for name, algorithm, env_id, config in workloads():
        if args.only and args.only not in name:
            continue
        samples: dict[str, list[float]] = {}
        for _ in range(args.repeats):
            for fragment in args.fragments:
                variant = f"jaxlearner, fragments of {fragment}"
                rate = ours(algorithm, env_id, config, fragment, args.steps)
                samples.setdefault(variant, []).append(rate)
            if use_sbx:
                samples.setdefault("sbx", []).append(theirs(algorithm, env_id, config, args.steps))
        sbx_rate = statistics.median(samples["sbx"]) if "sbx" in samples else None
        for variant, rates in samples.items():
            median = statistics.median(rates)
            rows.append(
                {
                    "workload": name,
                    "variant": variant,
                    "env_steps_per_s": median,
                    "min": min(rates),
                    "max": max(rates),
                    "ratio_to_sbx": None if sbx_rate is None else median / sbx_rate,
                }
            )
            print(rows[-1], flush=True)
    machine = f"{platform.machine()}, jax {jax.__version__} on {jax.default_backend()}"
    for row in rows:
        row.update(steps=args.steps, repeats=args.repeats)
    out = pathlib.Path(__file__).resolve().parent / "results" / "bench_intensity.json"
    # Rows of workloads not run this time (--only) are kept from the previous results.
    ran = {row["workload"] for row in rows}
    kept = json.loads(out.read_text())["rows"] if out.is_file() else []
    rows = [row for row in kept if row["workload"] not in ran] + rows
    out.write_text(json.dumps({"machine": machine, "rows": rows}, indent=2) + "\n")
    print("\n| workload | variant | env steps / s (median) | min | max | x sbx |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        ratio = "-" if row["ratio_to_sbx"] is None else f"{row['ratio_to_sbx']:.2f}"
        print(
            f"| {row['workload']} | {row['variant']} | {row['env_steps_per_s']:.0f} | "
            f"{row['min']:.0f} | {row['max']:.0f} | {ratio} |"
        )


if __name__ == "__main__":
    main()
