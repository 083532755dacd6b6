"""One peer run with RL Zoo's settings: SB3 PPO, SB3 DQN, sbx SAC or sbx TD3 on a gymnasium task.

Run (``bench_mujoco.py`` and ``bench_presets.py`` do, with a peer virtualenv's python, and time
the whole process): ``python benchmarks/peer_zoo.py {ppo,dqn,sac,td3} ENV_ID [--entry NAME]
--seed S --max-steps N --eval-every E --out RUN``. Needs torch (``pip install torch==2.13.0``,
the CPU wheel, first), stable-baselines3, sbx-rl and rl_zoo3 in that virtualenv (rl_zoo3 only
for its ``hyperparams/{ppo,dqn,sac,td3}.yml``, read from its folder without importing it: ``pip
install rl_zoo3 --no-deps`` is enough).

``--entry`` names the zoo's entry (default: the env id, with the zoo's ``-v4`` for a MuJoCo
``-v5`` id, as jaxlearner's presets map them). ``normalize: true`` wraps the training env in
``VecNormalize`` with the zoo's ``gamma``; evaluation (one environment per episode, stepped
together, as jaxlearner's) uses a copy of its observation statistics, frozen, and raw
rewards. ``lin_X`` is ``X`` times SB3's remaining progress over the zoo's ``n_timesteps``
(the schedule the zoo sets, even when fewer steps are run), and so is DQN's exploration.
SB3 PPO and DQN are the libraries RL Zoo's PPO and DQN rows were tuned with; SAC and TD3 run
on sbx (the same algorithms in JAX, several times faster on this CPU than SB3's), TD3 with the
zoo's ``noise_type: normal`` as SB3's ``NormalActionNoise`` of std ``noise_std``.

It writes ``RUN/run.json`` and ``RUN/metrics.jsonl`` in jaxlearner's run-folder format
(training rows with ``episode_return_mean``, evaluation rows with ``eval/return_mean``),
so ``jaxlearner plot`` draws its curve beside jaxlearner's, and prints one JSON line with
the final evaluation, the env steps and the training time. Torch runs on one thread.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time
from typing import Any


def zoo_hyperparams(algorithm: str, env_id: str, entry: str | None = None) -> dict[str, Any]:
    """The zoo's ``entry`` (default: the env's, its ``-v4`` name for a ``-v5`` id), read from
    the installed ``rl_zoo3``'s files without importing it (its import needs the Hugging Face
    client and more, none of which the tables need)."""
    import importlib.util

    import yaml

    spec = importlib.util.find_spec("rl_zoo3")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("peer_zoo.py reads RL Zoo's tables: pip install rl_zoo3 --no-deps")
    folder = pathlib.Path(next(iter(spec.submodule_search_locations)))
    table = yaml.safe_load((folder / "hyperparams" / f"{algorithm}.yml").read_text())
    name = entry or env_id.replace("-v5", "-v4")
    return dict(table[name])


def translate(algorithm: str, hyperparams: dict[str, Any]) -> tuple[dict, dict]:
    """The zoo's entry as the model's keyword arguments, and the run's settings."""
    import torch

    run = {
        "n_envs": int(hyperparams.pop("n_envs", 1)),
        "n_timesteps": int(float(hyperparams.pop("n_timesteps"))),
        "normalize": hyperparams.pop("normalize", False),
        "policy": hyperparams.pop("policy", "MlpPolicy"),
        "noise_type": hyperparams.pop("noise_type", None),
        "noise_std": float(hyperparams.pop("noise_std", 0.0)),
    }
    for key, value in list(hyperparams.items()):
        if isinstance(value, str) and value.startswith("lin_"):
            initial = float(value[4:])
            hyperparams[key] = lambda remaining, initial=initial: remaining * initial
    if "policy_kwargs" in hyperparams:
        if algorithm in ("sac", "td3"):  # sbx: flax activations
            import flax.linen as nn
        else:
            nn = torch.nn
        hyperparams["policy_kwargs"] = eval(hyperparams["policy_kwargs"], {"nn": nn, "dict": dict})
    if isinstance(run["normalize"], str):
        run["normalize"] = eval(run["normalize"])
    return hyperparams, run


PEERS = {"ppo": "sb3-ppo", "dqn": "sb3-dqn", "sac": "sbx-sac", "td3": "sbx-td3"}
"""The library each algorithm's peer runs on."""


class Writer:
    """``run.json`` and ``metrics.jsonl`` in jaxlearner's format."""

    def __init__(self, out: pathlib.Path, algorithm: str, env_id: str, seed: int) -> None:
        out.mkdir(parents=True, exist_ok=False)
        peer = PEERS[algorithm]
        info = {"algorithm": peer, "env": env_id, "seed": seed, "stop_reward": None}
        (out / "run.json").write_text(json.dumps(info) + "\n")
        self.file = (out / "metrics.jsonl").open("a")
        self.step = 0

    def write(self, row: dict[str, float]) -> None:
        self.step += 1
        self.file.write(json.dumps({"step": self.step, **row}) + "\n")
        self.file.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("algorithm", choices=sorted(PEERS))
    parser.add_argument("env_id")
    parser.add_argument("--entry", default=None, help="the zoo's entry (default: the env's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, required=True)
    parser.add_argument("--eval-every", type=int, required=True, help="env steps")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument(
        "--eval-seed", type=int, default=None, help="evaluation starts (default: seed+10000)"
    )
    parser.add_argument("--out", type=pathlib.Path, required=True)
    args = parser.parse_args()

    import numpy as np
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    if args.algorithm == "ppo":
        from stable_baselines3 import PPO as Model
    elif args.algorithm == "dqn":
        from stable_baselines3 import DQN as Model
    elif args.algorithm == "sac":
        from sbx import SAC as Model
    else:
        from sbx import TD3 as Model

    zoo = zoo_hyperparams(args.algorithm, args.env_id, args.entry)
    hyperparams, run = translate(args.algorithm, zoo)
    writer = Writer(args.out, args.algorithm, args.env_id, args.seed)
    start = time.perf_counter()
    env = make_vec_env(args.env_id, n_envs=run["n_envs"], seed=args.seed)
    # One environment per evaluation episode, stepped together, as jaxlearner evaluates
    # (evaluate_policy runs one episode on each); the sittings of 2026-11-25/26 used one.
    eval_seed = args.seed + 10_000 if args.eval_seed is None else args.eval_seed
    eval_env = make_vec_env(args.env_id, n_envs=args.eval_episodes, seed=eval_seed)
    if run["normalize"]:
        options = run["normalize"] if isinstance(run["normalize"], dict) else {}
        env = VecNormalize(env, gamma=hyperparams.get("gamma", 0.99), **options)
        eval_env = VecNormalize(eval_env, training=False, norm_reward=False, **options)
    if run["noise_type"] is not None:  # as the zoo's ExperimentManager builds it
        if run["noise_type"] != "normal":
            raise SystemExit(f"peer_zoo.py: noise_type {run['noise_type']!r} is not handled")
        from stable_baselines3.common.noise import NormalActionNoise

        size = env.action_space.shape[0]
        sigma = run["noise_std"] * np.ones(size)
        hyperparams["action_noise"] = NormalActionNoise(mean=np.zeros(size), sigma=sigma)
    model = Model(run["policy"], env, seed=args.seed, verbose=0, **hyperparams)
    final: dict[str, float] = {}

    def evaluate() -> dict[str, float]:
        if run["normalize"]:
            eval_env.obs_rms = env.obs_rms.copy()
        # Every evaluation starts episode i from reset(seed=eval_seed + i), as
        # ``jaxlearner eval --seed eval_seed`` does: the two sides' final returns are on the
        # same starting states (Pendulum's return hangs on them as much as on the policy).
        eval_env.seed(eval_seed)
        returns, _ = evaluate_policy(
            model, eval_env, n_eval_episodes=args.eval_episodes, return_episode_rewards=True
        )
        row = {
            "eval/return_mean": float(np.mean(returns)),
            "eval/return_min": float(np.min(returns)),
            "eval/return_max": float(np.max(returns)),
            "env_steps": float(model.num_timesteps),
        }
        writer.write(row)
        return row

    class Log(BaseCallback):
        """Episode returns every ``eval_every // 10`` steps, an evaluation every ``eval_every``,
        and the stop at ``--max-steps``."""

        def __init__(self) -> None:
            super().__init__()
            self.next_eval, self.next_log = args.eval_every, args.eval_every // 10

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_log:
                self.next_log += args.eval_every // 10
                returns = [info["r"] for info in self.model.ep_info_buffer]
                if returns:
                    writer.write(
                        {
                            "episode_return_mean": float(np.mean(returns)),
                            "env_steps": float(self.num_timesteps),
                            "time_total_s": time.perf_counter() - start,
                        }
                    )
            if self.num_timesteps >= self.next_eval:
                self.next_eval += args.eval_every
                final.update(evaluate())
            return self.num_timesteps < args.max_steps

    # lin_ schedules run over the zoo's n_timesteps, as its train script sets them; the
    # callback stops the run at --max-steps.
    model.learn(total_timesteps=max(run["n_timesteps"], args.max_steps), callback=Log())
    train_time = time.perf_counter() - start
    if final.get("env_steps") != model.num_timesteps:
        final.update(evaluate())
    print(
        json.dumps(
            {
                "final_return": final["eval/return_mean"],
                "env_steps": model.num_timesteps,
                "train_time_s": train_time,
            }
        )
    )


if __name__ == "__main__":
    main()
