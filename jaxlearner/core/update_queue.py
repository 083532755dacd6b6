"""UpdateQueue: RLlib's asynchronous ``LearnerGroup`` updates over JAX's asynchronous dispatch.

RLlib's ``LearnerGroup(max_queue_len=...)`` with ``update(..., async_update=True)``
sends each batch to remote learners and returns, instead of that batch's
results, the results of earlier updates that have finished. In JAX the
dispatch is asynchronous already: :meth:`~jaxlearner.Learner.update` returns
device arrays before they are computed. An :class:`UpdateQueue` adds the
bookkeeping around it, on the host:

* the newest state (:attr:`UpdateQueue.state`): each update is chained on the
  one before, so the updates run in order and none is lost;
* at most ``max_requests_in_flight`` dispatched updates whose metrics are not
  ready yet (RLlib's ``max_requests_in_flight_per_learner``): dispatching more
  would only hold more batches in device memory, the device runs them one
  after the other anyway;
* at most ``max_queue_len`` batches waiting on the host for a free slot. When
  a batch arrives and the waiting queue is full, the **oldest waiting batch is
  dropped** (RLlib: "if the queue is full it will evict the oldest batch
  first"), so a sampler faster than the learner never blocks and the learner
  trains on the freshest data; :attr:`UpdateQueue.num_dropped` counts them.
  A dispatched update cannot be cancelled, so only waiting batches are dropped.

:meth:`UpdateQueue.async_update` never waits for the device. Results come back
oldest first, each once, as host values.

Example:
  >>> queue = jl.UpdateQueue(learner, learner.init(key, batch), max_queue_len=4)
  ... # doctest: +SKIP
  >>> for batch in batches:                                            # doctest: +SKIP
  ...     for metrics in queue.async_update(batch):  # finished updates, oldest first
  ...         log(metrics)
  >>> rest = queue.wait()                    # every remaining update, oldest first
  ... # doctest: +SKIP
"""

from __future__ import annotations

import collections
from typing import Any, final

import jax

from jaxlearner.core.learner import Learner
from jaxlearner.core.state import LearnerState
from jaxlearner.types import Batch

DEFAULT_MAX_QUEUE_LEN = 20
"""RLlib's default ``max_queue_len``."""

DEFAULT_MAX_REQUESTS_IN_FLIGHT = 3
"""RLlib's default ``max_requests_in_flight_per_learner``."""


def metrics_ready(metrics: Any) -> bool:
    """Whether every array of an update's metrics is computed (never waits)."""
    return all(leaf.is_ready() for leaf in jax.tree.leaves(metrics))


def _check_count(name: str, value: object, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"UpdateQueue: {name} must be an int >= 1 (RLlib's default is {default}); "
            f"got {value!r}."
        )
    return value


@final
class UpdateQueue:
    """A bounded queue of asynchronous updates of one learner (RLlib's ``async_update``).

    Args:
      learner: the learner (placed anywhere: ``jl.LearnerGroup(learner)`` works).
      state: the state to start from, e.g. ``learner.init(key, batch)``.
      max_queue_len: batches that may wait on the host for a free slot; when
        one more arrives, the oldest waiting batch is dropped (RLlib's
        ``LearnerGroup(max_queue_len=...)``, default 20).
      max_requests_in_flight: dispatched updates whose results are not ready
        yet (RLlib's ``max_requests_in_flight_per_learner``, default 3).

    Raises:
      TypeError: when ``learner`` is not a :class:`~jaxlearner.Learner`.
      ValueError: for a ``max_queue_len`` or ``max_requests_in_flight`` that is
        not an int >= 1 (before anything is compiled).

    Example:
      >>> queue = jl.UpdateQueue(learner, state, max_queue_len=2)   # doctest: +SKIP
      >>> queue.async_update(batch)           # [] until an update has finished
      ... # doctest: +SKIP
      >>> [float(m["policy"]["total_loss"]) for m in queue.wait()]  # doctest: +SKIP
    """

    def __init__(
        self,
        learner: Learner,
        state: LearnerState,
        *,
        max_queue_len: int = DEFAULT_MAX_QUEUE_LEN,
        max_requests_in_flight: int = DEFAULT_MAX_REQUESTS_IN_FLIGHT,
    ) -> None:
        if not isinstance(learner, Learner):
            raise TypeError(f"UpdateQueue needs a jl.Learner; got {type(learner).__name__}.")
        self._learner = learner
        self._state = state
        self.max_queue_len = _check_count("max_queue_len", max_queue_len, DEFAULT_MAX_QUEUE_LEN)
        self.max_requests_in_flight = _check_count(
            "max_requests_in_flight", max_requests_in_flight, DEFAULT_MAX_REQUESTS_IN_FLIGHT
        )
        self._waiting: collections.deque[tuple[Batch, dict[str, Any]]] = collections.deque()
        self._in_flight: collections.deque[Any] = collections.deque()
        self.num_dropped = 0

    @property
    def learner(self) -> Learner:
        """The learner updated."""
        return self._learner

    @property
    def state(self) -> LearnerState:
        """The newest state: after every dispatched update (its arrays may not be ready).

        A learner built with ``donate_state`` frees it at the next dispatch: copy what
        you keep (``jax.tree.map(jnp.copy, queue.state.modules[m].params)``).
        """
        return self._state

    @property
    def num_waiting(self) -> int:
        """Batches waiting on the host, at most ``max_queue_len``."""
        return len(self._waiting)

    @property
    def num_in_flight(self) -> int:
        """Dispatched updates not returned yet, at most ``max_requests_in_flight``."""
        return len(self._in_flight)

    def async_update(self, batch: Batch, **update_kwargs: Any) -> list[dict[str, Any]]:
        """Queues ``batch`` and returns the results of the updates that have finished.

        Never waits for the device: finished updates are collected (oldest first,
        stopping at the first one still running), waiting batches are dispatched
        while a slot is free, then ``batch`` is dispatched or waits (dropping
        the oldest waiting batch when ``max_queue_len`` are waiting).

        Args:
          batch: as for :meth:`~jaxlearner.Learner.update`.
          **update_kwargs: passed to :meth:`~jaxlearner.Learner.update` with this
            batch (``env_steps=...``).

        Returns:
          The metrics of the updates that finished since the last call, oldest
          first, as host values (``{module_id: {name: value}}``); often ``[]``.

        Raises:
          As :meth:`~jaxlearner.Learner.update`, when a batch is dispatched: a bad
          batch that has to wait raises at the call that dispatches it.
        """
        finished = self._collect(wait=False)
        self._dispatch()
        if len(self._waiting) == self.max_queue_len:
            self._waiting.popleft()
            self.num_dropped += 1
        self._waiting.append((batch, update_kwargs))
        self._dispatch()
        return finished

    def wait(self) -> list[dict[str, Any]]:
        """Runs every waiting batch, waits for all updates, returns their results oldest first.

        Example:
          >>> results = queue.wait(); queue.num_in_flight                # doctest: +SKIP
          0
        """
        finished = []
        while self._waiting or self._in_flight:
            finished += self._collect(wait=True)
            self._dispatch()
        return finished

    def _dispatch(self) -> None:
        while self._waiting and len(self._in_flight) < self.max_requests_in_flight:
            batch, update_kwargs = self._waiting.popleft()
            self._state, metrics = self._learner.update(self._state, batch, **update_kwargs)
            self._in_flight.append(metrics)

    def _collect(self, *, wait: bool) -> list[dict[str, Any]]:
        finished = []
        while self._in_flight and (wait or metrics_ready(self._in_flight[0])):
            finished.append(jax.device_get(self._in_flight.popleft()))
        return finished
