"""The Trainer's first update, compiled on a thread while the learner initializes and the
first rollout is collected (issue 24's cold start).

A cold ``jaxlearner train ppo`` spent about 3 of its 14 seconds compiling the update, after
the first rollout and before anything else could happen. Everything that program depends on
is known when the Trainer is made: the learner state's shapes (``jax.eval_shape`` of
``learner.init``), the rollout's (:func:`~jaxlearner.training.rollout.experience_shapes`,
the policy traced, not run) and the batch's (the feed's postprocess lowered on them).
:func:`compile_first_update` starts a thread that compiles the feed's postprocess and
:meth:`~jaxlearner.Learner.compile_update` from those shapes; JAX keeps both programs, and
the Trainer waits for the thread before its first update, so nothing compiles twice. An
off-policy trainer's first update comes after ``learning_starts`` env steps: its call (the
transitions added, then the updates due) compiles while the warm-up's rollouts are
collected. XLA compiles without holding Python's lock, so on two cores it runs beside the
main thread's own work (the model's init, the environments, the act function).

The result is the same program the first update would have compiled: the updates, metrics
and checkpoints do not change. A failure on the thread (a custom policy that cannot be
traced on shapes alone) is logged at debug level and changes nothing else: the first update
then compiles when it runs, as it did before.

Example:
  >>> ahead = compile_first_update(algorithm, feed, runner, init_key, 32)  # doctest: +SKIP
  >>> ahead.wait()                                                         # doctest: +SKIP
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import jax

from jaxlearner.algorithms.algorithm import Algorithm
from jaxlearner.training.feeds import Feed
from jaxlearner.training.rollout import experience_shapes
from jaxlearner.training.training_runner import TrainingRunner

logger = logging.getLogger(__name__)


class CompileAhead:
    """A compilation running on its own thread; :meth:`wait` joins it. The thread is not a
    daemon: a process that ends while it compiles waits for it (seconds) rather than tear
    JAX down under it.
    """

    def __init__(self, compile_fn: Callable[[], None]) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(compile_fn,), name="jaxlearner-compile-ahead", daemon=False
        )
        self._thread.start()

    def _run(self, compile_fn: Callable[[], None]) -> None:
        try:
            compile_fn()
        except Exception:  # the first update compiles when it runs instead
            logger.debug(
                "Compiling the first update ahead failed; it compiles when it runs.", exc_info=True
            )

    def wait(self) -> None:
        """Returns when the compilation has finished (at once if it has)."""
        self._thread.join()


def compile_first_update(
    algorithm: Algorithm,
    feed: Feed,
    runner: TrainingRunner,
    init_key: jax.Array,
    rollout_steps: int,
) -> CompileAhead | None:
    """Starts compiling, on a thread, what the Trainer's first ``feed.learn`` will run.

    Args:
      algorithm: the trainer's algorithm (its learner, ``explore`` and module id).
      feed: the trainer's feed (:meth:`~jaxlearner.training.feeds.Feed.compile_ahead`: an
        on-policy feed's postprocess and update; a replay feed's add-and-update call of the
        first iteration past ``learning_starts``, compiled while the warm-up collects).
      runner: the training runner, its environments reset (their observations give the
        rollout's shapes).
      init_key: the key the trainer initializes the learner with.
      rollout_steps: steps per environment in a rollout.

    Returns:
      The running compilation, or ``None`` (no thread, nothing traced) for a learner that
      runs eagerly (``jit=False``).
    """
    learner = algorithm.learner
    if not learner.config.jit:
        return None
    observations = runner.observations
    env_steps = rollout_steps * runner.num_envs

    def compile_fn() -> None:
        state = jax.eval_shape(learner.init, init_key)
        module = state.modules[algorithm.module_id]
        experience = experience_shapes(algorithm.explore, module, observations, rollout_steps)
        feed.compile_ahead(state, module, experience, env_steps)

    return CompileAhead(compile_fn)
