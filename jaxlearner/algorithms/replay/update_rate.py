"""How many replay updates an iteration runs: RLlib's training intensity as a count.

:func:`updates_due` is the rule the :func:`~jaxlearner.Trainer`'s replay feed follows
(none before ``learning_starts`` env steps, then ``updates_per_step`` per env step
collected, the fractions carried over); :func:`warmup_iterations` and
:func:`updates_per_iteration` are the same rule for a fixed number of env steps per
iteration, as static numbers (anakin's compiled loop); :func:`first_updates` is the count of
the first iteration that updates, for compiling that call ahead.
"""

from __future__ import annotations

import math

from jaxlearner.algorithms.algorithm import OffPolicyAlgorithm


def updates_due(
    algorithm: OffPolicyAlgorithm, env_steps_before: int, env_steps: int, carried: float
) -> tuple[int, float]:
    """How many updates an iteration that collected ``env_steps`` runs, and the fraction left.

    None while the env steps so far (``env_steps_before + env_steps``) stay
    below ``learning_starts``; after that ``updates_per_step * env_steps``,
    plus the fraction ``carried`` over from earlier iterations, rounded down.

    Returns:
      ``(count, carried)``: the whole updates due now and the fraction to carry on.

    Example:
      >>> updates_due(dqn, env_steps_before=1000, env_steps=8, carried=0.5)  # 1/4 per step
      ... # doctest: +SKIP
      (2, 0.5)
    """
    if env_steps_before + env_steps < algorithm.learning_starts:
        return 0, carried
    due = carried + algorithm.updates_per_step * env_steps
    return int(due), due % 1.0


def first_updates(
    algorithm: OffPolicyAlgorithm, steps_per_iteration: int, horizon: int = 10_000
) -> int | None:
    """The count :func:`updates_due` gives the first iteration that updates, each iteration
    collecting ``steps_per_iteration`` env steps from the start; ``None`` when none of the
    first ``horizon`` iterations after the warm-up updates (a training intensity that low).

    Example:
      >>> first_updates(dqn, steps_per_iteration=256)  # doctest: +SKIP
      128
    """
    before = warmup_iterations(algorithm, steps_per_iteration) * steps_per_iteration
    carried = 0.0
    for _ in range(horizon):
        count, carried = updates_due(algorithm, before, steps_per_iteration, carried)
        if count:
            return count
        before += steps_per_iteration
    return None


def warmup_iterations(algorithm: OffPolicyAlgorithm, steps_per_iteration: int) -> int:
    """The iterations :func:`updates_due` leaves without updates, at fixed env steps each.

    Those whose env steps so far stay below ``learning_starts``: iteration
    ``i = 1, 2, ...`` collects ``i * steps_per_iteration`` in all.
    """
    return max(math.ceil(algorithm.learning_starts / steps_per_iteration), 1) - 1


def updates_per_iteration(algorithm: OffPolicyAlgorithm, steps_per_iteration: int) -> int:
    """The updates :func:`updates_due` gives each iteration after the warm-up, as a static int.

    Raises:
      ValueError: when ``updates_per_step * steps_per_iteration`` is not a
        positive whole number (a static loop needs one), or an iteration
        collects more transitions than the buffer holds.
    """
    exact = algorithm.updates_per_step * steps_per_iteration
    count = round(exact)
    if count < 1 or not math.isclose(exact, count, rel_tol=1e-6):
        raise ValueError(
            f"Anakin runs a static number of updates per iteration: {algorithm.name}'s "
            f"updates_per_step ({algorithm.updates_per_step}) x {steps_per_iteration} env steps "
            f"per iteration is {exact:g}, not a positive whole number. Change num_envs, the "
            "rollout length or the training intensity so that it is."
        )
    if steps_per_iteration > algorithm.replay_capacity:
        raise ValueError(
            f"An iteration collects {steps_per_iteration} transitions, more than the replay "
            f"capacity ({algorithm.replay_capacity})."
        )
    return count
