"""Where one ``jl.Trainer.step`` of an off-policy preset goes, part by part, beside sbx's step.

Run: ``python benchmarks/profile_step.py [--algorithm sac] [--env Pendulum-v1] [--origin
rl_zoo3] [--steps 1000] [--peer-python PEER_VENV/bin/python]``, nothing else running. Builds the
preset row's algorithm, steps a :class:`~jaxlearner.Trainer` (one env, as the row's ``num_envs``
is for SAC's zoo rows) ``--warmup`` times, then ``--steps`` times with a wrapper timing each
part: the compiled add-and-update call (to its return, and to its result with
``block_until_ready``), the rest of ``ReplayFeed.learn``, ``EnvRunner.sample`` (the act call,
``env.step``, the key split), ``memory_stats``, the trainer's key split, writing the row
(``Driver.record``, one JSON-lines writer), ``episode_stats`` and ``flatten_metrics``; the
rest of ``Trainer.step`` is what remains. Prints one table in milliseconds per step.

With ``--peer-python`` (SAC rows only), sbx SAC with RL Zoo's entry behind the row (its own,
or the one a row tuned here started from: ``bench_presets.zoo_entry``) in that virtualenv:
``learn`` for ``--warmup`` steps, then ``--steps`` more with its ``train`` timed, printed as ms
per env step. Both sides' figures come
from the same sitting; the machine moves by a third between sittings, so compare only those.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

PEER = """
import json, sys, time
settings = json.loads(sys.argv[1])
sys.path.insert(0, settings["benchmarks"])
from peer_zoo import translate, zoo_hyperparams
from sbx import SAC
hyperparams, _ = translate("sac", zoo_hyperparams("sac", settings["env"], settings["entry"]))
model = SAC("MlpPolicy", settings["env"], seed=0, verbose=0, **hyperparams)
model.learn(settings["warmup"])
spent = [0.0]
train = model.train
def timed(*args, **kwargs):
    start = time.perf_counter(); out = train(*args, **kwargs)
    spent[0] += time.perf_counter() - start
    return out
model.train = timed
start = time.perf_counter()
model.learn(settings["steps"], reset_num_timesteps=False)
total = time.perf_counter() - start
print(json.dumps({"step_ms": 1e3 * total / settings["steps"],
                  "train_ms": 1e3 * spent[0] / settings["steps"]}))
"""


def timer(totals: dict[str, float], label: str, function: Callable) -> Callable:
    """``function`` with its seconds added to ``totals[label]``."""

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        out = function(*args, **kwargs)
        totals[label] += time.perf_counter() - start
        return out

    return timed


def ours(algorithm_name: str, env_id: str, origin: str, warmup: int, steps: int) -> dict:
    """Milliseconds per ``Trainer.step``, whole and by part."""
    import gymnasium as gym
    import jax

    import jaxlearner as jl
    from jaxlearner.algorithms.presets.table import preset
    from jaxlearner.training import driver, env_runner, feeds, trainer
    from jaxlearner.training.outputs.loggers import JSONLinesWriter

    config, _ = preset(algorithm_name, env_id, origin)
    env = gym.make(env_id)
    recipe = importlib.import_module(f"jaxlearner.algorithms.{algorithm_name}").RECIPE
    algorithm = recipe.build(env.observation_space, env.action_space, config)
    writer = JSONLinesWriter(tempfile.mkdtemp() + "/metrics.jsonl")
    trained = jl.Trainer(algorithm, env_id, num_envs=1, seed=0, progress=False, writers=[writer])
    for _ in range(warmup):
        trained.step()
    totals: dict[str, float] = collections.defaultdict(float)
    returned: dict[str, float] = collections.defaultdict(float)
    feed = trained.engine._feed
    update = feed._add_and_update

    def add_and_update(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        out = update(*args, **kwargs)
        returned["update"] += time.perf_counter() - start
        jax.block_until_ready(out)
        totals["update"] += time.perf_counter() - start
        return out

    feed._add_and_update = add_and_update
    (policy_key,) = list(trained.engine.runner._policies)
    act = trained.engine.runner._policies[policy_key]

    def timed_act(*args: Any) -> Any:
        start = time.perf_counter()
        out = act(*args)
        returned["act"] += time.perf_counter() - start
        jax.block_until_ready(out)
        totals["act"] += time.perf_counter() - start
        return out

    trained.engine.runner._policies[policy_key] = timed_act
    envs = trained.engine.runner._envs
    envs.step = timer(totals, "env.step", envs.step)
    patches = [
        (feeds.ReplayFeed, "learn", "learn"),
        (env_runner.EnvRunner, "sample", "sample"),
        (env_runner, "_split_to_host", "sample keys"),
        (trainer, "memory_stats", "memory_stats"),
        (trainer, "_split_in_three", "trainer keys"),
        (driver.Driver, "record", "record"),
        (trainer, "episode_stats", "episode_stats"),
        (trainer, "flatten_metrics", "flatten_metrics"),
    ]
    for owner, name, label in patches:
        setattr(owner, name, timer(totals, label, getattr(owner, name)))
    start = time.perf_counter()
    for _ in range(steps):
        trained.step()
    whole = time.perf_counter() - start
    trained.close()
    per_step = {label: 1e3 * seconds / steps for label, seconds in totals.items()}
    per_step["update returned"] = 1e3 * returned["update"] / steps
    per_step["act returned"] = 1e3 * returned["act"] / steps
    per_step["rest of learn"] = per_step.pop("learn") - per_step["update"]
    parts = ("rest of learn", "sample", "memory_stats", "trainer keys", "record")
    parts += ("episode_stats", "flatten_metrics")
    per_step["rest of step"] = 1e3 * whole / steps - per_step["update"]
    per_step["rest of step"] -= sum(per_step[p] for p in parts)
    per_step["step"] = 1e3 * whole / steps
    return per_step


def peer(python: str, env_id: str, entry: str, warmup: int, steps: int) -> dict:
    """sbx SAC's milliseconds per env step and per ``train`` call, in its own process (the
    peer virtualenv, where ``peer_zoo.py`` reads RL Zoo's entry ``entry``)."""
    here = str(pathlib.Path(__file__).resolve().parent)
    settings = {"env": env_id, "entry": entry, "warmup": warmup, "steps": steps, "benchmarks": here}
    done = subprocess.run(
        [python, "-c", PEER, json.dumps(settings)], check=True, capture_output=True, text=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--algorithm", default="sac")
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--origin", default="rl_zoo3")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--peer-python", default=None)
    args = parser.parse_args()
    entry = None
    if args.peer_python:
        from bench_presets import zoo_entry

        from jaxlearner.algorithms.presets.table import preset_row

        entry = zoo_entry(preset_row(args.algorithm, args.env, args.origin))
        if args.algorithm != "sac" or entry is None:
            parser.error(
                "--peer-python times sbx SAC: it needs a sac row with an RL Zoo entry behind "
                f"it; got {args.algorithm} on {args.env} ({args.origin})"
            )
    per_step = ours(args.algorithm, args.env, args.origin, args.warmup, args.steps)
    print(f"jaxlearner {args.algorithm} {args.env} ({args.origin}), ms per Trainer.step:")
    for label, ms in sorted(per_step.items(), key=lambda item: -item[1]):
        print(f"  {label:18s} {ms:7.3f}")
    if args.peer_python:
        sbx = peer(args.peer_python, args.env, entry, args.warmup, args.steps)
        print(f"sbx SAC: {sbx['step_ms']:.3f} ms per env step, {sbx['train_ms']:.3f} in train")


if __name__ == "__main__":
    main()
