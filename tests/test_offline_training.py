"""OfflineTrainer and the command line's record and --dataset: checks, checkpoints, learning."""

import dataclasses
import json
import time

import gymnasium as gym
import jax
import numpy as np
import pytest
from helpers import (
    CompileCounter,
    assert_same_stats,
    assert_trees_close,
    interrupted_and_resumed,
    tree_equal,
)

import jaxlearner as jl
from jaxlearner.algorithms.networks.spaces import space_to_json
from jaxlearner.cli import main
from jaxlearner.errors import SmallDatasetWarning
from jaxlearner.training.offline.datasets import Dataset, record_episodes

CARTPOLE = gym.make("CartPole-v1")
SMALL = {"hidden_sizes": (8,), "train_batch_size": 32}


@pytest.fixture(scope="module")
def random_dataset():
    """Ten CartPole episodes of an untrained BC policy (sampling)."""
    algorithm = jl.algorithms.build("bc", CARTPOLE.observation_space, CARTPOLE.action_space, SMALL)
    module = algorithm.learner.init(jax.random.key(0)).modules["default_policy"]
    return record_episodes(algorithm.explore, module, "CartPole-v1", 10, num_envs=5, seed=1)


def test_a_dataset_of_other_spaces_is_refused_before_anything_compiles(random_dataset):
    three = gym.spaces.Discrete(3)
    other = Dataset(random_dataset.columns, random_dataset.observation_space, space_to_json(three))
    learner = jl.algorithms.bc(CARTPOLE.observation_space, CARTPOLE.action_space, SMALL)
    with CompileCounter() as compiled:
        with pytest.raises(ValueError, match=r"Discrete\(3\) differs from the learner's"):
            jl.OfflineTrainer(learner, other, "CartPole-v1")
        # The learner fits the dataset, the environment does not.
        fits = jl.algorithms.bc(CARTPOLE.observation_space, three, SMALL)
        with pytest.raises(ValueError, match=r"Discrete\(3\) differs from the environment's"):
            jl.OfflineTrainer(fits, other, "CartPole-v1")
        with pytest.raises(TypeError, match="OfflineTrainer trains offline algorithms"):
            jl.OfflineTrainer(jl.algorithms.ppo(*random_dataset.spaces()), random_dataset)
        unnamed = Dataset(random_dataset.columns, other.observation_space, space_to_json(three))
        with pytest.raises(ValueError, match="names no environment to evaluate in; pass env="):
            jl.OfflineTrainer(fits, unnamed)
    assert compiled.count == 0


@pytest.mark.parametrize("name", ["bc", "marwil"])
def test_a_dataset_smaller_than_a_batch_trains_on_all_its_rows_with_a_warning(name, random_dataset):
    rows = random_dataset.num_steps
    big = {**SMALL, "train_batch_size": rows + 1}
    learner = jl.algorithms.build(name, *random_dataset.spaces(), big).learner
    with pytest.warns(SmallDatasetWarning, match=rf"holds {rows} rows, fewer than"):
        trainer = jl.OfflineTrainer(learner, random_dataset, eval_episodes=1)
    try:
        assert trainer.engine.algorithm.train_batch_size == rows  # every row, in each update
        assert trainer.engine.algorithm.config.train_batch_size == rows + 1  # the config as asked
        assert trainer.engine.rows_per_iteration == rows  # one pass, one update
        assert trainer.step()["env_steps"] == rows
    finally:
        trainer.close()


@pytest.mark.parametrize("name", ["bc", "marwil"])
def test_checkpoints_round_trip_and_resume_exactly(name, random_dataset, tmp_path):
    def make(seed=0):
        learner = jl.algorithms.build(name, *random_dataset.spaces(), SMALL).learner
        return jl.OfflineTrainer(learner, random_dataset, eval_episodes=2, seed=seed)

    interrupted, resumed = interrupted_and_resumed(make, tmp_path, steps=2)
    assert tree_equal(resumed.state, interrupted.state)
    assert resumed.counters == interrupted.counters and resumed.counters.iteration == 2
    assert resumed.counters.env_steps == 2 * interrupted.engine.rows_per_iteration
    assert_same_stats(interrupted.history, resumed.history)
    # A restored learner is rebuilt from its recipe, and its algorithm is offline.
    learner, state = jl.restore(tmp_path)
    assert isinstance(jl.algorithms.algorithm_for(learner), jl.algorithms.OfflineAlgorithm)
    assert tree_equal(state, interrupted.state)
    assert_same_stats([interrupted.step()], [resumed.step()])
    assert interrupted.eval() == resumed.eval()
    # Resuming on another dataset is refused: the first five episodes only.
    cut = np.flatnonzero(random_dataset.columns["episode_ends"])[4] + 1
    half = Dataset(
        {k: v[:cut] for k, v in random_dataset.columns.items()},
        random_dataset.observation_space,
        random_dataset.action_space,
        "CartPole-v1",
    )
    other = jl.OfflineTrainer(jl.algorithms.build(name, *half.spaces(), SMALL).learner, half)
    with (
        jl.CheckpointManager(tmp_path) as checkpoint,
        pytest.raises(ValueError, match="Resume with the same dataset"),
    ):
        other.restore(checkpoint)


def test_run_stops_and_evaluates_by_rows(random_dataset):
    learner = jl.algorithms.bc(*random_dataset.spaces(), SMALL)
    trainer = jl.OfflineTrainer(learner, random_dataset, eval_episodes=2, progress=False)
    rows = trainer.engine.rows_per_iteration
    assert rows == random_dataset.num_steps // 32 * 32  # one pass by default
    history = trainer.run([jl.MaxEnvSteps(3 * rows)], steps_per_eval=2 * rows)
    assert [h["env_steps"] for h in history] == [rows, 2 * rows, 3 * rows]
    assert ["eval/return_mean" in h for h in history] == [False, True, False]
    assert history[-1]["default_policy/num_grad_steps"] == 3 * rows // 32
    with CompileCounter() as compiled:  # the update loop and the policy compiled once
        trainer.step()
        trainer.eval()
    assert compiled.count == 0


def test_all_devices_train_as_one_device_does(random_dataset):
    learner = jl.algorithms.marwil(*random_dataset.spaces(), SMALL)
    one = jl.OfflineTrainer(learner, random_dataset, eval_episodes=2)
    many = jl.OfflineTrainer(learner, random_dataset, eval_episodes=2, devices="all")
    assert many.learner.placement.num_devices == 8  # the fake devices of conftest.py
    first, second = one.step(), many.step()
    np.testing.assert_allclose(
        second["default_policy/total_loss"], first["default_policy/total_loss"], rtol=1e-5
    )
    assert_trees_close(
        many.learner.placement.get(many.state).modules["default_policy"].params,
        one.state.modules["default_policy"].params,
        rtol=1e-4,
        atol=1e-6,
    )


TINY_PPO = [
    "--max-steps",
    "1024",
    "--eval-every",
    "1024",
    "--num-envs",
    "4",
    "--no-progress",
    "--config",
    "train_batch_size=1024",
    "minibatch_size=256",
    "num_epochs=1",
    "hidden_sizes=[16]",
]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("offline")
    assert main(["train", "ppo", "--out", str(folder / "ppo"), *TINY_PPO]) == 0
    data = folder / "data"
    assert main(["record", str(folder / "ppo"), "--episodes", "4", "--out", str(data)]) == 0
    return folder, data


def test_record_writes_a_dataset_of_the_runs_policy(recorded, capsys):
    folder, data = recorded
    dataset = jl.load_dataset(data)
    assert dataset.num_episodes == 4 and dataset.env == "CartPole-v1"
    assert dataset.source["algorithm"] == "ppo" and dataset.source["policy"] == "exploit"
    assert dataset.source["checkpoint_step"] == 1
    before = {p.name: p.read_bytes() for p in data.iterdir()}
    assert ".jaxlearner.lock" in before  # the first record's, naming its pid
    (data / ".jaxlearner.lock").write_text('{"pid": 1}')  # as a record in another process left it
    before[".jaxlearner.lock"] = b'{"pid": 1}'
    with pytest.raises(SystemExit) as exited:
        main(["record", str(folder / "ppo"), "--episodes", "2", "--out", str(data)])
    assert exited.value.code == 2
    assert "holds a dataset already; datasets are never overwritten" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in data.iterdir()} == before  # the lock file too


def test_train_bc_on_a_recorded_dataset_then_eval(recorded, capsys):
    folder, data = recorded
    out = folder / "bc"
    argv = ["train", "bc", "--dataset", str(data), "--out", str(out), "--no-progress"]
    small = ["--config", "train_batch_size=64", "hidden_sizes=[16]"]  # 4 short episodes
    assert main([*argv, "--max-steps", "1000", "--eval-every", "500", *small]) == 0
    printed = capsys.readouterr().out
    assert f"bc on dataset {data}, evaluated on CartPole-v1" in printed
    assert "dataset rows in" in printed
    info = json.loads((out / "run.json").read_text())
    assert info["dataset"] == str(data) and info["env"] == "CartPole-v1"
    # run.json records the resolved config: the overrides over the preset row and defaults.
    assert info["config"]["train_batch_size"] == 64 and info["config"]["hidden_sizes"] == [16]
    fields = {f.name for f in dataclasses.fields(jl.algorithms.BCConfig)}
    assert set(info["config"]) == fields
    assert main(["eval", str(out), "--episodes", "2"]) == 0
    assert "bc on CartPole-v1, checkpoint step" in capsys.readouterr().out
    # --resume reads the dataset from run.json; this run met its stop conditions.
    assert main(["train", "--resume", str(out), "--no-progress"]) == 0
    assert "is complete: its stop conditions hold" in capsys.readouterr().out
    # A BC run's policy records like any other, here sampling.
    explored = folder / "explored"
    assert main(["record", str(out), "--episodes", "2", "--out", str(explored), "--explore"]) == 0
    assert jl.load_dataset(explored).source["policy"] == "explore"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "bc"], "bc trains on a dataset: give --dataset DIR"),
        (["train", "ppo", "--dataset", "DATA"], "--dataset is for offline algorithms"),
        (["train", "marwil", "--dataset", "/no/data"], "is not a jaxlearner dataset"),
        (
            ["train", "bc", "--dataset", "DATA", "--env", "Acrobot-v1"],
            "dataset's observation_space Box",
        ),
        (["record", "RUN", "--episodes", "0", "--out", "x"], "expected a positive integer"),
        (["record", "RUN", "--out", "x"], "the following arguments are required: --episodes"),
        (["record", "/no/run", "--episodes", "1", "--out", "x"], "is not a run folder"),
        (["train", "bc", "--dataset", "minari:nobody/nothing-v0"], "--dataset minari:nobody"),
    ],
)
def test_bad_offline_input_exits_2_with_one_line(argv, message, recorded, capsys, tmp_path):
    folder, data = recorded
    argv = [{"DATA": str(data), "RUN": str(folder / "ppo")}.get(a, a) for a in argv]
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exited:
        main([*argv, *(["--out", str(out)] if argv[0] == "train" else [])])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert err.count("--dataset") <= 2, err  # named once, plus its value in the message
    assert not out.exists()


@pytest.fixture(scope="module")
def expert_dataset():
    """Twenty episodes of a PPO policy trained on CartPole until it evaluates at 495."""
    config = {
        "lr": 3e-4,
        "train_batch_size": 2048,
        "minibatch_size": 256,
        "num_epochs": 10,
        "hidden_sizes": (64, 64),
        "lambda_": 0.95,
        "clip_param": 0.2,
        "use_kl_loss": False,
        "grad_clip": 0.5,
    }
    start = time.perf_counter()
    learner = jl.algorithms.ppo(CARTPOLE.observation_space, CARTPOLE.action_space, config)
    trainer = jl.Trainer(learner, "CartPole-v1", num_envs=8, seed=0, progress=False)
    trainer.run([jl.RewardBound(495.0)], steps_per_eval=10_240, max_iterations=150)
    module = trainer.state.modules["default_policy"]
    dataset = record_episodes(trainer.engine.algorithm.exploit, module, "CartPole-v1", 20, seed=1)
    trainer.close()
    print(
        f"PPO expert: {trainer.counters.env_steps} env steps, {dataset.num_steps} steps "
        f"recorded, return {dataset.episode_returns().mean():.1f}, "
        f"{time.perf_counter() - start:.0f} s"
    )
    return dataset


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bc", "marwil"])
def test_offline_algorithms_learn_cartpole_from_ppo_episodes(name, expert_dataset):
    config = {"lr": 1e-3, "train_batch_size": 256, "hidden_sizes": (64, 64)}
    if name == "marwil":
        # RLlib's beta = 1 weighs rows by up to exp(A / 10) while the values are still far off
        # (returns near 100); here it peaked near 465 and then drifted down to 313-420 on 2 of
        # 3 seeds, while beta = 0.5 reached 500 on 6 of 6.
        config["beta"] = 0.5
    learner = jl.algorithms.build(name, *expert_dataset.spaces(), config).learner
    trainer = jl.OfflineTrainer(learner, expert_dataset, eval_episodes=10, progress=False)
    start = time.perf_counter()
    history = trainer.run(
        [jl.RewardBound(495.0)], steps_per_eval=trainer.engine.rows_per_iteration, max_iterations=30
    )
    seconds = time.perf_counter() - start
    final = trainer.eval()
    print(
        f"{name} CartPole from {expert_dataset.num_episodes} PPO episodes: "
        f"{trainer.counters.env_steps} rows, {seconds:.0f} s, eval {final['return_mean']}"
    )
    assert history[-1]["eval/return_mean"] >= 495.0
    assert final["return_mean"] >= 475.0
