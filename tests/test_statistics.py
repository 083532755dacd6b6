"""Aggregates over seeds (Agarwal et al. 2021): IQM, median, mean, optimality gap with
stratified bootstrap intervals, performance profiles, IQM curves and `jaxlearner plot`."""

import json

import matplotlib
import numpy as np
import pytest

from jaxlearner.cli import main
from jaxlearner.training.outputs import statistics as st
from jaxlearner.training.outputs.plotting import curve_stats, plot_curves

matplotlib.use("Agg")


@pytest.mark.parametrize("n", [1, 3, 4, 5, 8, 10, 37])
def test_iqm_is_scipys_trimmed_mean_of_all_scores(n):
    stats = pytest.importorskip("scipy.stats")
    scores = np.random.default_rng(n).normal(size=(n, 3))
    assert st.iqm(scores) == pytest.approx(stats.trim_mean(scores, 0.25, axis=None), rel=1e-12)
    assert st.median(scores) == pytest.approx(np.median(scores))
    assert st.mean(scores) == pytest.approx(np.mean(scores))


def test_iqm_ignores_outliers_and_nans():
    assert st.iqm([10.0, 20.0, 30.0, 40.0, 1e6, np.nan]) == 30.0  # 5 finite, 1 cut each end
    assert st.optimality_gap([0.5, 1.0, 1.5]) == pytest.approx(1 / 6)
    assert st.optimality_gap([400.0, 500.0], target=475.0) == pytest.approx(37.5)


def test_stratified_resamples_draw_each_tasks_runs_from_that_task_alone():
    scores = np.stack([np.arange(6.0), 100.0 + np.arange(6.0)], axis=1)  # [6 runs, 2 tasks]
    samples = st.stratified_resamples(scores, reps=500, seed=1)
    assert samples.shape == (500, 6, 2)
    assert np.isin(samples[..., 0], scores[:, 0]).all()
    assert np.isin(samples[..., 1], scores[:, 1]).all()
    # Runs are drawn independently per task: the two columns' choices differ somewhere.
    assert not np.array_equal(samples[..., 0], samples[..., 1] - 100.0)


def test_bootstrap_intervals_hold_the_estimate_stay_in_range_and_shrink_with_runs():
    rng = np.random.default_rng(0)
    few, many = rng.uniform(0, 500, size=5), rng.uniform(0, 500, size=200)
    for scores in (few, many):
        for statistic in (st.iqm, st.median, st.mean):
            low, high = st.bootstrap_interval(scores, statistic, reps=1000, seed=3)
            assert scores.min() <= low <= statistic(scores) <= high <= scores.max()
    width = [np.subtract(*st.bootstrap_interval(s, st.iqm, reps=1000)[::-1]) for s in (few, many)]
    assert width[1] < width[0] / 2
    again = st.bootstrap_interval(few, st.iqm, reps=1000, seed=3)
    assert again == st.bootstrap_interval(few, st.iqm, reps=1000, seed=3)


def test_aggregates_and_the_table():
    table = st.aggregates([480.0, 500.0, 495.0, 120.0], target=475.0, reps=500)
    assert set(table) == set(st.STATISTICS)
    assert table["iqm"][0] == 487.5 and table["mean"][0] == pytest.approx(398.75)
    assert table["optimality_gap"][0] == pytest.approx((475 - 120) / 4)
    assert "optimality_gap" not in st.aggregates([1.0, 2.0], reps=10)
    text = st.format_table({"ppo CartPole-v1": [480.0, 500.0], "dqn CartPole-v1": [300.0]})
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["group", "runs", "IQM"]
    assert lines[1].startswith("ppo CartPole-v1") and lines[2].startswith("dqn CartPole-v1")


def test_performance_profile():
    scores = [[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [4.0, 40.0]]
    fraction, low, high = st.performance_profile(scores, [0.0, 2.5, 25.0], reps=300)
    # tau 2.5: task 0 has 2 of 4 above, task 1 all 4: (0.5 + 1) / 2.
    assert fraction.tolist() == [1.0, 0.75, 0.25]  # tau 25: task 0 none, task 1 half
    assert (low <= fraction).all() and (fraction <= high).all()


def test_iqm_curve_per_time_with_nan_seeds():
    values = np.array([[0.0, np.nan, 1.0], [4.0, np.nan, 2.0], [8.0, np.nan, np.nan]])
    center, low, high = st.iqm_curve(values, reps=200)
    assert center[0] == 4.0 and np.isnan(center[1]) and center[2] == 1.5
    assert low[0] >= 0.0 and high[0] <= 8.0 and np.isnan(low[1])
    c, lo, hi = curve_stats(np.stack([values, values + 1.0]), spread="iqm")  # [C, S, T]
    assert c.shape == (2, 3) and c[1, 0] == 5.0


@pytest.mark.parametrize(
    ("scores", "message"),
    [
        (np.zeros((2, 2, 2)), "scores must be"),
        ([], "scores must be"),
        ([np.nan, np.nan], "no finite value"),
    ],
)
def test_bad_scores_are_refused(scores, message):
    with pytest.raises(ValueError, match=message):
        st.aggregates(scores)


def test_bad_reps_and_confidence_are_refused():
    with pytest.raises(ValueError, match="reps must be a positive int"):
        st.bootstrap_interval([1.0, 2.0], st.iqm, reps=0)
    with pytest.raises(ValueError, match="confidence must be in"):
        st.bootstrap_interval([1.0, 2.0], st.iqm, confidence=1.0)


def _cartpole_like_seeds(n_seeds=8, seed=0):
    """Returns in [0, 500] whose mean +- std passes 500: most seeds solved, some not."""
    rng = np.random.default_rng(seed)
    steps = np.arange(1, 11) * 10_000.0
    solved = np.minimum(500.0, steps / 20.0 * rng.uniform(0.8, 1.2, size=(n_seeds, 1)))
    solved[: n_seeds // 4] = rng.uniform(10, 60, size=(n_seeds // 4, len(steps)))
    return steps, solved


def test_an_iqm_band_stays_inside_the_return_range_where_mean_std_does_not():
    steps, values = _cartpole_like_seeds()
    _, _, std_high = curve_stats(values, spread="std")
    assert std_high.max() > 500.0  # the complaint: mean + std rises past what CartPole gives
    metrics = {"eval/return_mean": values, "eval/env_steps": np.tile(steps, (8, 1))}
    ax = plot_curves(metrics, "eval/return_mean", spread="iqm")
    (band,) = ax.collections
    y = band.get_paths()[0].vertices[:, 1]
    assert y.min() >= 0.0 and y.max() <= 500.0
    assert "IQM" in ax.get_title()


def _fake_run(folder, algorithm, returns, steps, stop_reward=475.0):
    folder.mkdir(parents=True)
    info = {"algorithm": algorithm, "env": "CartPole-v1", "stop_reward": stop_reward}
    (folder / "run.json").write_text(json.dumps(info))
    rows = [
        {"iteration": i + 1, "env_steps": s, "eval/return_mean": r}
        for i, (s, r) in enumerate(zip(steps, returns, strict=True))
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(folder)


def test_plot_aggregate_and_table_from_the_command_line(tmp_path, capsys):
    steps, values = _cartpole_like_seeds()
    ppo = [_fake_run(tmp_path / f"ppo{i}", "ppo", row, steps) for i, row in enumerate(values)]
    dqn = [
        _fake_run(tmp_path / f"dqn{i}", "dqn", row * 0.5, steps) for i, row in enumerate(values[:3])
    ]
    out = tmp_path / "iqm.png"
    assert main(["plot", *ppo, *dqn, "--aggregate", "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000 and capsys.readouterr().out.strip() == str(out)
    assert main(["plot", *ppo, *dqn, "--table"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("ppo CartPole-v1") and lines[1].split()[2] == "8"
    assert lines[2].startswith("dqn CartPole-v1") and lines[2].split()[2] == "3"
    assert "opt. gap" in lines[0] and "stop reward 475" in lines[-1]
    expected = st.iqm(values[:, -1])
    assert lines[1].split()[3] == f"{expected:.1f}"


def test_plot_table_of_runs_with_different_stop_rewards_or_none(tmp_path, capsys):
    # PPO (475) and DQN (400) on CartPole: a gap column per stop reward (it was a traceback).
    steps, values = _cartpole_like_seeds()
    ppo = _fake_run(tmp_path / "ppo", "ppo", values[0], steps)
    dqn = _fake_run(tmp_path / "dqn", "dqn", values[1], steps, stop_reward=400.0)
    free = _fake_run(tmp_path / "free", "sac", values[2], steps, stop_reward=None)
    assert main(["plot", ppo, dqn, free, "--table"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = [cell.strip() for cell in lines[0].split("  ") if cell.strip()]
    assert header[-2:] == ["opt. gap to 400 [95% CI]", "opt. gap to 475 [95% CI]"]
    for line, final in zip(lines[1:4], values[:3, -1], strict=True):
        gaps = [max(target - final, 0.0) for target in (400.0, 475.0)]  # one run per group
        assert line.split()[-6::3] == [f"{gap:.1f}" for gap in gaps], line
    assert lines[-1] == (
        "(final evaluation return per run; optimality gap to the stop rewards 400, 475)"
    )
    # No run names a stop reward: no gap column.
    assert main(["plot", free, "--table"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "gap" not in lines[0] and lines[-1] == "(final evaluation return per run)"


def test_plot_table_needs_evaluations(tmp_path, capsys):
    run = _fake_run(tmp_path / "run", "ppo", [], [])
    with pytest.raises(SystemExit) as exited:
        main(["plot", run, "--table"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "holds no evaluation" in err and err.count("\n") == 1
