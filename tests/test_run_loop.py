"""run_loop, the loop every trainer's run shares: evaluation schedule, writers, stops."""

import dataclasses

import pytest
from helpers import ListWriter

import jaxlearner as jl
from jaxlearner.training.run_loop import (
    budget_end,
    next_evaluation,
    run_loop,
    stop_conditions_list,
    stop_description,
)


@dataclasses.dataclass
class Counters:
    env_steps: int = 0
    iteration: int = 0
    time_total_s: float = 0.0


class CountingTrainer:
    """100 env steps per iteration; the return grows by 10 per iteration; evaluations counted."""

    def __init__(self):
        self.counters = Counters()
        self.history = []
        self.stop_requested = False
        self.evaluations = 0

    def step(self):
        c = self.counters
        c.env_steps, c.iteration, c.time_total_s = c.env_steps + 100, c.iteration + 1, c.iteration
        stats = {"iteration": float(c.iteration), "env_steps": float(c.env_steps)}
        stats["episode_return_mean"] = 10.0 * c.iteration
        self.history.append(stats)
        return stats

    def eval(self):
        self.evaluations += 1
        return {"return_mean": 10.0 * self.counters.iteration}


def test_evaluates_every_steps_per_eval_and_writes_the_evaluations():
    trainer, writer = CountingTrainer(), ListWriter()
    ran = run_loop(trainer, [writer], jl.MaxEnvSteps(700), steps_per_eval=250, progress=False)
    # Evaluations once 250 steps have passed since the last: after iterations 3 and 6.
    assert [s["iteration"] for s in ran] == [1, 2, 3, 4, 5, 6, 7]
    assert [s["iteration"] for s in ran if "eval/return_mean" in s] == [3, 6]
    assert trainer.evaluations == 2 and trainer.history == ran  # the same dicts, evals joined
    assert writer.rows == [
        (3, {"eval/return_mean": 30.0, "env_steps": 300.0, "iteration": 3.0}),
        (6, {"eval/return_mean": 60.0, "env_steps": 600.0, "iteration": 6.0}),
    ]
    assert ran[2]["time_total_s"] == 2  # refreshed after the evaluation


def test_evaluate_at_end_evaluates_the_last_iteration_before_on_iteration_sees_it():
    trainer, writer, seen = CountingTrainer(), ListWriter(), []
    ran = run_loop(
        trainer,
        [writer],
        jl.MaxEnvSteps(700),
        steps_per_eval=250,
        on_iteration=lambda stats: seen.append(dict(stats)),
        progress=False,
        evaluate_at_end=True,
    )
    assert [s["iteration"] for s in ran if "eval/return_mean" in s] == [3, 6, 7]
    assert seen[-1]["eval/return_mean"] == 70.0  # what a checkpoint saved from it keeps
    assert writer.rows[-1] == (7, {"eval/return_mean": 70.0, "env_steps": 700.0, "iteration": 7.0})
    # A scheduled evaluation on the last iteration is not repeated; without the flag, none.
    trainer = CountingTrainer()
    run_loop(trainer, [], jl.MaxEnvSteps(600), steps_per_eval=300, evaluate_at_end=True)
    assert trainer.evaluations == 2
    trainer = CountingTrainer()
    run_loop(trainer, [], jl.MaxEnvSteps(700), steps_per_eval=250)
    assert trainer.evaluations == 2


def test_evaluate_at_end_does_not_evaluate_after_a_stop_request():
    trainer = CountingTrainer()

    def request_at_two(stats):
        trainer.stop_requested = stats["iteration"] == 2

    run_loop(trainer, [], jl.MaxEnvSteps(200), on_iteration=request_at_two, evaluate_at_end=True)
    assert trainer.evaluations == 1  # the last iteration, MaxEnvSteps(200) holding after it
    trainer = CountingTrainer()
    original_step = trainer.step

    def step_then_request():
        stats = original_step()
        trainer.stop_requested = True  # a Ctrl-C while the iteration ran
        return stats

    trainer.step = step_then_request
    run_loop(trainer, [], jl.MaxEnvSteps(100), evaluate_at_end=True, progress=False)
    assert trainer.evaluations == 0


def test_stops_on_any_condition_on_max_iterations_and_on_request():
    trainer = CountingTrainer()
    bound = jl.RewardBound(45.0, key="episode_return_mean")
    ran = run_loop(trainer, [], [bound, jl.MaxEnvSteps(10_000)], progress=False)
    assert len(ran) == 5  # 50 >= 45 at the fifth iteration
    assert len(run_loop(CountingTrainer(), [], bound, max_iterations=2, progress=False)) == 2

    def request_at_two(stats):
        trainer.stop_requested = stats["iteration"] == 2

    trainer = CountingTrainer()
    ran = run_loop(trainer, [], jl.MaxEnvSteps(10_000), on_iteration=request_at_two)
    assert [s["iteration"] for s in ran] == [1, 2]  # the iteration in flight completes
    # No stop condition and no max_iterations: until the stop request.
    trainer = CountingTrainer()

    def request_at_four(stats):
        trainer.stop_requested = stats["iteration"] == 4

    assert len(run_loop(trainer, [], [], on_iteration=request_at_four)) == 4
    for bad in ({"steps_per_eval": 0}, {"eval_every_iterations": 1.5}, {"max_iterations": True}):
        with pytest.raises(ValueError, match="must be a positive int or None"):
            run_loop(CountingTrainer(), [], jl.MaxEnvSteps(100), **bad)


def test_evaluates_every_n_iterations_beside_the_env_step_cadence():
    trainer, writer = CountingTrainer(), ListWriter()
    ran = run_loop(
        trainer, [writer], jl.MaxIterations(7), eval_every_iterations=3, steps_per_eval=500
    )
    # Every 3 iterations (3, 6) and every 500 env steps (5: 500 env steps).
    assert [s["iteration"] for s in ran if "eval/return_mean" in s] == [3, 5, 6]
    assert [step for step, _ in writer.rows] == [3, 5, 6]


def test_stop_conditions_and_their_description():
    bound = jl.RewardBound(475.0, times=2)
    anyof = jl.AnyOf(bound, jl.MaxEnvSteps(10))
    assert stop_conditions_list(bound) == [bound] and stop_conditions_list(anyof) == [anyof]
    assert stop_conditions_list((bound,)) == [bound] and stop_conditions_list([]) == []
    description = stop_description([bound, jl.MaxEnvSteps(300_000)])
    assert description == "stops at 2 evals >= 475 in a row or 300k steps"
    assert stop_description([]) is None


class SizedTrainer(CountingTrainer):
    """A CountingTrainer that says its iteration's size, as Trainer and AnakinTrainer do."""

    env_steps_per_iteration = 100


def _bar_rows(text):
    """The bar's states as tqdm drew them (each redraw after a carriage return)."""
    return [row.strip() for row in text.replace("\r", "\n").split("\n") if "steps" in row]


@pytest.mark.parametrize("trainer_class", [CountingTrainer, SizedTrainer])
def test_the_progress_bar_runs_to_the_rounded_budget_and_ends_at_100_percent(trainer_class, capsys):
    # 250 env steps asked for, whole iterations of 100: the run ends at 300.
    trainer = trainer_class()
    run_loop(trainer, [], jl.MaxEnvSteps(250), progress=True)
    assert trainer.counters.env_steps == 300
    rows = _bar_rows(capsys.readouterr().err)
    assert rows[-1].startswith("100%|") and "300/300 steps" in rows[-1], rows
    assert not any("/?" in row for row in rows)  # tqdm past its total: "0%| 300/?"
    if trainer_class is SizedTrainer:  # the rounded total from the first draw, compiling
        assert "stops at 300 steps" in rows[0] and "0/300 steps" in rows[1]
    # A run resumed at 200 env steps ends at 300 too: its total counts from there.
    trainer.counters.env_steps = 200
    run_loop(trainer, [], jl.MaxEnvSteps(250), progress=True)
    assert "300/300 steps" in _bar_rows(capsys.readouterr().err)[-1]


def test_budget_end():
    # ceil((budget - start) / per) whole iterations after start.
    assert budget_end(100_000, 2048) == 49 * 2048 == 100_352
    assert budget_end(4096, 2048) == 4096 and budget_end(250, 100, start=50) == 250
    assert budget_end(250, 100, start=300) == 300  # spent: where it stands
    with pytest.raises(ValueError, match="per_iteration must be a positive int; got 0"):
        budget_end(250, 0)


def test_a_second_run_continues_the_evaluation_schedule_of_the_history():
    straight = CountingTrainer()
    run_loop(straight, [], jl.MaxEnvSteps(1000), steps_per_eval=250, progress=False)
    resumed = CountingTrainer()
    run_loop(resumed, [], jl.MaxEnvSteps(400), steps_per_eval=250, progress=False)
    # The last evaluation was at 300 env steps: the next falls at 550 (iteration 6), not 650.
    run_loop(resumed, [], jl.MaxEnvSteps(1000), steps_per_eval=250, progress=False)
    assert [s["iteration"] for s in straight.history if "eval/return_mean" in s] == [3, 6, 9]
    assert resumed.history == straight.history


def test_next_evaluation_counts_from_the_last_one_or_from_zero():
    assert next_evaluation([], 250) == 250
    history = [{"env_steps": 100.0}, {"env_steps": 300.0, "eval/return_mean": 1.0}]
    assert next_evaluation(history, 250) == 550
    assert next_evaluation([*history, {"env_steps": 400.0}], 250) == 550
