"""The ``jaxlearner`` command: train, evaluate and plot built-in algorithms.

* ``jaxlearner train ppo`` trains PPO on its default environment (CartPole-v1)
  with RL Zoo's tuned settings for it (its preset row, :data:`DEFAULTS`; the library's
  own defaults stay RLlib's), which reach the reward bound in seconds on a laptop CPU,
  logs to the console and ``runs/NAME/metrics.jsonl``, checkpoints to
  ``runs/NAME/checkpoints`` periodically and at the end, and prints where
  everything went.
* ``jaxlearner eval runs/NAME`` restores the newest intact (or best, or ``--step N``)
  checkpoint and reports evaluation returns; ``--video episode.gif`` (or ``.mp4``)
  records one episode, ``--render human`` plays one in a window. A damaged newest
  step is reported in one line and skipped, by ``record`` and ``train --resume`` too
  (:mod:`jaxlearner.cli.checkpoint_choice`).
* ``jaxlearner train ALGO --env ENV`` starts from the environment's preset row where
  there is one (RL Zoo's settings for PPO, SAC and DQN on classic control and MuJoCo);
  ``jaxlearner presets [ALGO]`` lists them, ``--preset none`` uses the library's defaults.
* ``jaxlearner plot runs/NAME [more runs]`` writes a learning-curve PNG.
* ``jaxlearner record runs/NAME --episodes 20 --out data/NAME`` records episodes of a
  run's policy as a dataset, and ``jaxlearner train bc --dataset data/NAME`` (or
  ``marwil``) trains an offline algorithm on it (``--dataset minari:ID`` reads a
  locally stored Minari dataset), evaluating in the dataset's environment.

Bad arguments print one line and exit with status 2, before a run folder is
made; bare ``jaxlearner`` prints the usage and exits with status 2.

Ctrl-C (SIGINT) or SIGTERM during ``train`` finishes the iteration in flight,
saves a checkpoint, prints how to continue (``jaxlearner train --resume RUN``)
and exits with status 130 or 143. ``train`` and ``eval`` keep JAX's compiled
programs in a persistent cache (``~/.cache/jaxlearner/jax``, or JAX's own
``JAX_COMPILATION_CACHE_DIR`` when set; ``--compilation-cache DIR``, or off with
``--no-compilation-cache`` or ``JAXLEARNER_NO_COMPILATION_CACHE=1``).

``train --env-runners N`` steps the environments on ``N`` Ray actors of ``--num-envs``
each (the ``jaxlearner[ray]`` extra; ``--cpus-per-env-runner``,
``--max-env-runner-restarts``, ``--ray-address`` or ``RAY_ADDRESS`` to join a cluster);
APPO's runners sample asynchronously. With ``--resume`` they start fresh environments.
"""

from jaxlearner.cli.defaults import DEFAULTS, Defaults
from jaxlearner.cli.main import main
from jaxlearner.cli.options import (
    CacheOptions,
    EvalOptions,
    Options,
    PlotOptions,
    PresetsOptions,
    RecordOptions,
    RunnerOptions,
    TrainOptions,
)
from jaxlearner.cli.parser import NO_CACHE_VARIABLE, parse
from jaxlearner.cli.run_folder import CHECKPOINTS, METRICS_FILE, RUN_FILE, UsageError

__all__ = [
    "CHECKPOINTS",
    "DEFAULTS",
    "METRICS_FILE",
    "NO_CACHE_VARIABLE",
    "RUN_FILE",
    "CacheOptions",
    "Defaults",
    "EvalOptions",
    "Options",
    "PlotOptions",
    "PresetsOptions",
    "RecordOptions",
    "RunnerOptions",
    "TrainOptions",
    "UsageError",
    "main",
    "parse",
]
