"""Pixels: Atari through ale-py beside SB3, and MinAtar compiled end to end (issue 25).

Three parts, each printing the markdown table for ``benchmarks/README.md`` and writing
``results/bench_pixels-<part>-<date>.json``; run nothing else on the machine meanwhile:

* ``python benchmarks/bench_pixels.py atari [--algorithms dqn ppo] [--repeats 3]
  [--steps 10240] [--learning-starts 2048] [--peer-python /work/benchvenv/bin/python]``:
  ``jaxlearner train dqn|ppo --env ALE/Breakout-v5`` (RL Zoo's ``atari`` presets, a budget of
  ``--steps``; DQN's warm-up ``--learning-starts`` and a buffer of ``--steps``, one evaluation
  of 10 games at the end) beside SB3 at the same settings (``peer_atari.py``, SB3's own Atari
  pipeline, the same final evaluation), each the whole process, timed from outside,
  interleaved: ours, SB3, ours, SB3, ... Env steps per second are the budget over the wall
  time.
* ``python benchmarks/bench_pixels.py minatar-peer [--repeats 3] [--steps 262144]``: PPO on
  ``gymnax:Breakout-MinAtar`` in ``jaxlearner.anakin`` (the MinAtar preset's config, no
  evaluation in the program) beside the purejaxrl-style fused reference
  (``fused_ppo.MINATAR``: the same shapes and gymnax-blines' network, the preset's). Each is
  compiled apart (timed), then the calls run interleaved after one untimed warm-up each;
  env steps per second over the median call.
* ``python benchmarks/bench_pixels.py minatar-return [--seeds 0 1 2] [--steps 5000000]``:
  ``jaxlearner train ppo --env gymnax:Breakout-MinAtar --max-steps 5000000 --stop-reward
  none --seed S`` (the preset), one process per seed; the final evaluation (10 episodes of the
  deterministic policy), the last three evaluations' mean, the training return (the stochastic
  policy's, over the last 100 or more episodes) and the wall time.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
RESULTS = HERE / "results"
JAXLEARNER = [sys.executable, "-m", "jaxlearner"]


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages, as ``uptime`` prints them."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def timed(argv: list[str], timeout: int = 3600) -> tuple[float, str]:
    """Runs ``argv`` as a process; its wall time and its stdout (raises on failure)."""
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:4]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds, done.stdout


def last_evaluations(run: pathlib.Path, count: int = 3) -> list[float]:
    """The run's last ``count`` evaluation returns, from its ``metrics.jsonl``."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["eval/return_mean"] for r in rows if "eval/return_mean" in r][-count:]


def ours_atari(algorithm: str, args: argparse.Namespace, out: pathlib.Path) -> dict:
    """``jaxlearner train ALGORITHM --env ALE/Breakout-v5`` on the budget; wall time."""
    argv = [*JAXLEARNER, "train", algorithm, "--env", args.env, "--out", str(out)]
    argv += ["--max-steps", str(args.steps), "--eval-every", str(args.steps)]
    argv += ["--checkpoint-every-steps", str(args.steps), "--stop-reward", "none"]
    argv += ["--no-progress", "--seed", "0"]
    if algorithm == "dqn":
        argv += ["--config", f"num_steps_sampled_before_learning_starts={args.learning_starts}"]
        argv += [f"replay_buffer_capacity={args.steps}"]
    seconds, _ = timed(argv)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evaluated = [r for r in rows if "eval/return_mean" in r][-1]
    return {
        "wall_s": seconds,
        "steps": rows[-1]["env_steps"],
        "eval_return": evaluated["eval/return_mean"],
        "eval_length_mean": evaluated.get("eval/length_mean"),
        "trainer_s": rows[-1].get("time_total_s"),
    }


def peer_atari(algorithm: str, args: argparse.Namespace) -> dict:
    """SB3 at the same settings (``peer_atari.py``) in the bench virtualenv; wall time."""
    argv = [args.peer_python, str(HERE / "peer_atari.py"), algorithm, "--env", args.env]
    argv += ["--steps", str(args.steps), "--learning-starts", str(args.learning_starts)]
    seconds, stdout = timed(argv)
    return {"wall_s": seconds, **json.loads(stdout.strip().splitlines()[-1])}


def bench_atari(args: argparse.Namespace) -> dict:
    runs: dict[str, list[dict]] = {}
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="bench_pixels-"))
    try:
        for repeat in range(args.repeats):
            for algorithm in args.algorithms:
                out = scratch / f"{algorithm}-{repeat}"
                runs.setdefault(f"jaxlearner {algorithm}", []).append(
                    ours_atari(algorithm, args, out)
                )
                runs.setdefault(f"sb3 {algorithm}", []).append(peer_atari(algorithm, args))
                print(f"repeat {repeat} {algorithm}: load {load_average()}", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    table = ["| workload | jaxlearner env steps/s | SB3 env steps/s | ratio |", "|---|---|---|---|"]
    for algorithm in args.algorithms:
        ours = [r["steps"] / r["wall_s"] for r in runs[f"jaxlearner {algorithm}"]]
        peer = [r["steps"] / r["wall_s"] for r in runs[f"sb3 {algorithm}"]]
        ratio = statistics.median(ours) / statistics.median(peer)
        table.append(
            f"| {algorithm} {args.env}, {args.steps:,} steps, whole process | "
            f"{' / '.join(f'{x:.0f}' for x in ours)} | {' / '.join(f'{x:.0f}' for x in peer)} "
            f"| {ratio:.2f} |"
        )
    return {"runs": runs, "table": table}


def bench_minatar_peer(args: argparse.Namespace) -> dict:
    import fused_ppo
    import jax

    import jaxlearner as jl
    from jaxlearner import anakin

    env = anakin.envs.make("gymnax:Breakout-MinAtar")
    reference = dataclasses.replace(fused_ppo.MINATAR, total_timesteps=args.steps)
    config, row = jl.algorithms.preset("ppo", "gymnax:Breakout-MinAtar")
    algorithm = jl.algorithms.build("ppo", env.observation_space, env.action_space, config)
    iterations = reference.num_updates
    anakin_config = anakin.AnakinConfig(
        num_envs=row.num_envs, num_iterations=iterations, evaluate=False
    )
    trains = {
        "jaxlearner anakin (MinAtar preset)": anakin.make_train(algorithm, env, anakin_config),
        "fused reference (gymnax-blines' MLP)": fused_ppo.make_train(reference, env),
    }
    key = jax.random.key(0)
    compiled, compile_s = {}, {}
    for name, train in trains.items():
        start = time.perf_counter()
        compiled[name] = jax.jit(train).lower(key).compile()
        compile_s[name] = time.perf_counter() - start
    for call in compiled.values():
        jax.block_until_ready(call(key))  # warm-up, untimed
    times: dict[str, list[float]] = {name: [] for name in compiled}
    for _ in range(args.repeats):
        for name, call in compiled.items():
            start = time.perf_counter()
            jax.block_until_ready(call(key))
            times[name].append(time.perf_counter() - start)
    steps = iterations * reference.num_envs * reference.num_steps
    ours = steps / statistics.median(times[next(iter(times))])
    table = ["| variant | compile (s) | env steps/s (median) | ours / it |", "|---|---|---|---|"]
    results = []
    for name, seconds in times.items():
        rate = steps / statistics.median(seconds)
        results.append({"variant": name, "compile_s": compile_s[name], "times_s": seconds})
        table.append(f"| {name} | {compile_s[name]:.1f} | {rate:,.0f} | {ours / rate:.2f} |")
    return {"steps": steps, "results": results, "table": table}


def bench_minatar_return(args: argparse.Namespace) -> dict:
    runs = []
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="bench_pixels-"))
    try:
        for seed in args.seeds:
            out = scratch / f"breakout-{seed}"
            argv = [*JAXLEARNER, "train", "ppo", "--env", "gymnax:Breakout-MinAtar"]
            argv += ["--out", str(out), "--max-steps", str(args.steps), "--stop-reward", "none"]
            argv += ["--no-progress", "--seed", str(seed)]
            seconds, _ = timed(argv, timeout=7200)
            evaluations = last_evaluations(out)
            run = {"seed": seed, "wall_s": seconds, "last_evaluations": evaluations}
            rows = (out / "metrics.jsonl").read_text().splitlines()
            records = [json.loads(row) for row in rows]
            run["curve"] = [
                (r["env_steps"], r["eval/return_mean"]) for r in records if "eval/return_mean" in r
            ]
            trained = [r for r in records if "episode_return_mean" in r]
            run["train_curve"] = [(r["env_steps"], r["episode_return_mean"]) for r in trained]
            run["train_return"] = trained[-1]["episode_return_mean"]
            runs.append(run)
            print(f"seed {seed}: {evaluations} in {seconds:.0f} s, load {load_average()}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    table = ["| seed | final evaluation | last 3 evaluations' mean | training return | wall (s) |"]
    table.append("|---|---|---|---|---|")
    for run in runs:
        values = run["last_evaluations"]
        table.append(
            f"| {run['seed']} | {values[-1]:.1f} | {statistics.mean(values):.1f} | "
            f"{run['train_return']:.1f} | {run['wall_s']:.0f} |"
        )
    return {"steps": args.steps, "runs": runs, "table": table}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["atari", "minatar-peer", "minatar-return"])
    parser.add_argument("--algorithms", nargs="+", default=["dqn", "ppo"])
    parser.add_argument("--env", default="ALE/Breakout-v5")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int)
    parser.add_argument("--learning-starts", type=int, default=2048)
    parser.add_argument("--peer-python", default="/work/benchvenv/bin/python")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    default_steps = {"atari": 10_240, "minatar-peer": 262_144, "minatar-return": 5_000_000}
    args.steps = args.steps or default_steps[args.part]
    sys.path.insert(0, str(HERE))
    started, load = datetime.datetime.now(datetime.UTC), load_average()
    bench = {
        "atari": bench_atari,
        "minatar-peer": bench_minatar_peer,
        "minatar-return": bench_minatar_return,
    }[args.part]
    result = bench(args)
    result.update(
        {
            "started": started.isoformat(timespec="seconds"),
            "load_start": load,
            "load_end": load_average(),
            "args": vars(args),
        }
    )
    RESULTS.mkdir(exist_ok=True)
    name = f"bench_pixels-{args.part}-{started:%Y-%m-%d-%H%M}.json"
    (RESULTS / name).write_text(json.dumps(result, indent=1) + "\n")
    print(f"load {load} -> {result['load_end']}; results/{name}")
    print("\n".join(result["table"]))


if __name__ == "__main__":
    main()
