"""``jaxlearner plot RUN...``: the runs' learning curves in one PNG.

matplotlib is imported when the plot is drawn: it is the one command that needs it.
"""

from __future__ import annotations

import pathlib

from jaxlearner.cli.options import PlotOptions
from jaxlearner.cli.run_folder import METRICS_FILE, UsageError, read_metrics, read_run
from jaxlearner.training.outputs.plotting import place_legend, plot_run


def plot(options: PlotOptions) -> int:
    """Runs ``jaxlearner plot``: the runs' learning curves in one PNG; returns the exit status.

    Raises:
      UsageError: for a folder that is no run or holds no returns, or an ``--out``
        in a folder that does not exist.
    """
    runs = [read_run(path) for path in options.runs]
    out = pathlib.Path(options.out) if options.out else runs[0][0] / "learning_curve.png"
    if not out.parent.is_dir():
        raise UsageError(
            f"--out {out}: expected a file in an existing folder; no folder {out.parent}"
        )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    for run, info in runs:
        records = read_metrics(run / METRICS_FILE)
        train = [r for r in records if r.get("episode_return_mean") is not None]
        evals = [
            r
            for r in records
            if r.get("eval/return_mean") is not None and r.get("env_steps") is not None
        ]
        if not train and not evals:
            raise UsageError(f"{run / METRICS_FILE} holds no returns to plot")
        label = f"{info['algorithm']} {info['env']} ({run.name})"
        plot_run(records, ax=axes, label=label, stop_reward=info.get("stop_reward"))
    place_legend(axes)
    figure.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(figure)
    print(out)
    return 0
