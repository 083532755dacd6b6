"""One run's learning curve and many seeds' curves: labels, stop line, bounds, legend."""

import numpy as np
import pytest

from jaxlearner.training.outputs import plotting

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")


def _records():
    """A CartPole-like run: a training return every 1000 steps, an evaluation every 2000."""
    records = []
    for i in range(1, 11):
        mean = 50.0 * i
        records.append(
            {
                "step": i,
                "env_steps": 1000 * i,
                "episode_return_mean": mean,
                "episode_return_min": mean - 300.0,  # below the bound 0 early on
                "episode_return_max": mean + 300.0,  # above the bound 500 late
            }
        )
        if i % 2 == 0:
            records.append({"step": i, "env_steps": 1000 * i, "eval/return_mean": mean + 10})
    records.append({"step": 11, "env_steps": 11000, "episode_return_mean": None})  # NaN, as JSON
    return records


def test_plot_run_labels_curves_stop_reward_and_keeps_within_bounds():
    import matplotlib.pyplot as plt

    ax = plotting.plot_run(
        _records(), label="ppo CartPole-v1 (run1)", stop_reward=475, reward_range=(0, 500)
    )
    legend = plotting.place_legend(ax)
    texts = [text.get_text() for text in legend.get_texts()]
    assert texts == [
        "ppo CartPole-v1 (run1): training return, 100-episode moving mean, with exploration",
        "ppo CartPole-v1 (run1): training return, min to max of those 100 episodes",
        "ppo CartPole-v1 (run1): evaluation return, deterministic policy",
        "stop reward 475",
    ]
    train, evals, stop = ax.get_lines()
    np.testing.assert_array_equal(train.get_xdata(), np.arange(1, 11) * 1000)  # the None is skipped
    np.testing.assert_array_equal(evals.get_xdata(), [2000, 4000, 6000, 8000, 10000])
    assert evals.get_linestyle() == "None" and evals.get_marker() == "o"
    assert stop.get_gid() == "stop_reward" and set(stop.get_ydata()) == {475}
    assert stop.get_xdata()[0] == 0 and stop.get_xdata()[1] == 1  # axes-wide: an axhline
    (band,) = ax.collections
    band_y = np.concatenate([path.vertices[:, 1] for path in band.get_paths()])
    assert band_y.min() >= 0 and band_y.max() <= 500  # clipped at the reward bounds
    bottom, top = ax.get_ylim()
    assert bottom >= -15 and top <= 515  # the bounds plus a 3% margin
    assert ax.get_xlabel() == "env steps" and ax.get_ylabel() == "episode return"
    # The legend sits below the axes, off the data.
    ax.figure.canvas.draw()
    renderer = ax.figure.canvas.get_renderer()
    assert legend.get_window_extent(renderer).y1 < ax.get_window_extent(renderer).y0
    plt.close(ax.figure)


def test_plot_run_compares_runs_on_one_axes_with_one_stop_line():
    import matplotlib.pyplot as plt

    ax = plotting.plot_run(_records(), label="a", stop_reward=475)
    plotting.plot_run(_records()[:4], ax=ax, label="b", stop_reward=475)
    stops = [line for line in ax.get_lines() if line.get_gid() == "stop_reward"]
    assert len(stops) == 1 and len(ax.get_lines()) == 5
    assert ax.get_lines()[0].get_color() != ax.get_lines()[3].get_color()
    plt.close(ax.figure)


def test_plot_run_without_returns_or_with_bad_bounds():
    with pytest.raises(ValueError, match="no episode_return_mean or eval/return_mean"):
        plotting.plot_run([{"env_steps": 10, "episode_return_mean": None}])
    with pytest.raises(ValueError, match="low < high"):
        plotting.plot_run(_records(), reward_range=(500, 0))


def test_plot_curves_clips_the_band_and_draws_the_stop_reward():
    import matplotlib.pyplot as plt

    # Per step, the seeds give mean 450 then 500 and std 50: the band's top would be
    # 500 then 550, past the bound 500, so it is clipped there.
    values = np.array([[400.0, 450.0], [500.0, 550.0]])
    metrics = {"episode_return_mean": values, "env_steps": np.array([[100, 200], [100, 200]])}
    ax = plotting.plot_curves(
        metrics, "episode_return_mean", stop_reward=475, reward_range=(0, 500)
    )
    (band,) = ax.collections
    assert np.concatenate([p.vertices[:, 1] for p in band.get_paths()]).max() <= 500
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["stop reward 475"]
    assert ax.get_ylim()[1] <= 515
    plt.close(ax.figure)
