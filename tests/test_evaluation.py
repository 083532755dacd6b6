"""The one evaluation over host runners: each environment's first episode, and its results."""

import types

import pytest

from jaxlearner.training.evaluation import EVAL_BLOCK, episode_results, first_episodes


def rollouts(*ended):
    """A sample() handing out rollouts that ended these (env, return, length) episodes."""
    stream = iter(ended)

    def sample():
        episodes = next(stream)
        return types.SimpleNamespace(
            episode_envs=[env for env, _, _ in episodes],
            episode_returns=[r for _, r, _ in episodes],
            episode_lengths=[n for _, _, n in episodes],
        )

    return sample


def test_each_environments_first_episode_counts_once():
    # env 1 ends two short episodes before env 0 ends its first: only the first of each counts.
    sample = rollouts([(1, 5.0, 3), (1, 6.0, 4)], [], [(0, 20.0, 40), (1, 9.0, 2)])
    episodes = first_episodes(sample, count=2)
    assert episodes == {1: (5.0, 3), 0: (20.0, 40)}
    results = episode_results([r for r, _ in episodes.values()], [n for _, n in episodes.values()])
    assert results == {
        "return_mean": 12.5,
        "return_min": 5.0,
        "return_max": 20.0,
        "length_mean": 21.5,
        "episodes": 2.0,
    }


def test_an_episode_that_never_ends_is_an_error_not_a_hang():
    sample = rollouts(*([[(0, 1.0, 1)]] + [[]] * 10))
    with pytest.raises(RuntimeError, match=r"1 evaluation episode\(s\) did not finish within 64"):
        first_episodes(sample, count=2, max_steps=2 * EVAL_BLOCK)
