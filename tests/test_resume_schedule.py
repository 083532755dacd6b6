"""``jaxlearner train --resume`` repeats the run it continues.

Interrupted anywhere (Ctrl-C before or after an evaluation, or a crash between an
evaluation and the next checkpoint) and resumed, a run's ``metrics.jsonl`` rows,
wall-time stats aside, equal those of the uninterrupted run with the same seed:
the evaluation, checkpoint and stop schedule continue where they were.
"""

import signal

import pytest
from helpers import TINY_PPO_OPTIONS, VARYING

from jaxlearner.cli import NO_CACHE_VARIABLE, main
from jaxlearner.training.outputs.loggers import JSONLinesWriter, read_json_lines

# 4 envs x 64 steps = 256 env steps an iteration, 12 iterations. Evaluations every 640 env
# steps after the last one: iterations 3, 6, 9, 12; checkpoints every 1024: iterations 4, 8,
# 12, and at each new best evaluation.
RUN = [
    "train",
    "ppo",
    "--max-steps",
    "3072",
    "--eval-every",
    "640",
    "--checkpoint-every-steps",
    "1024",
    *TINY_PPO_OPTIONS,
]


class Crash(BaseException):
    """A process dying (out of memory, kill -9): no handler, no last checkpoint."""


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A compilation cache of this module's own: the runs after the first skip compiling."""
    return ["--compilation-cache", str(tmp_path_factory.mktemp("cache"))]


@pytest.fixture(autouse=True)
def cache_on(monkeypatch):
    monkeypatch.delenv(NO_CACHE_VARIABLE, raising=False)


def rows(run):
    """The run's metrics rows without the wall-time stats."""
    return [
        {k: v for k, v in row.items() if k not in VARYING}
        for row in read_json_lines(run / "metrics.jsonl")
    ]


def interrupt_at(monkeypatch, iteration, evaluation, how):
    """Interrupts the run just after it writes iteration ``iteration``'s row (its evaluation
    row when ``evaluation``): SIGINT, whose handler lets the iteration finish and saves, or
    a :class:`Crash`, which leaves the metrics written past the newest checkpoint."""
    write = JSONLinesWriter.write

    def interrupting(self, step, metrics):
        write(self, step, metrics)
        if step == iteration and any(k.startswith("eval/") for k in metrics) == evaluation:
            monkeypatch.setattr(JSONLinesWriter, "write", write)  # once
            if how == "crash":
                raise Crash
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(JSONLinesWriter, "write", interrupting)


@pytest.fixture(scope="module")
def straight(tmp_path_factory, cache):
    out = tmp_path_factory.mktemp("straight") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(NO_CACHE_VARIABLE, raising=False)
        assert main([*RUN, *cache, "--out", str(out)]) == 0
    return rows(out)


def test_the_schedule_is_what_the_comment_says(straight):
    evaluated = [r["step"] for r in straight if "eval/return_mean" in r and "env_steps" in r]
    assert [r["step"] for r in straight if "iteration" in r and "eval/return_mean" not in r] != []
    assert sorted(set(evaluated)) == [3, 6, 9, 12]


@pytest.mark.parametrize(
    "interruptions",
    [
        # Ctrl-C before the first evaluation, then between an evaluation and a checkpoint,
        # then a crash between an evaluation and the checkpoint after it.
        [(2, False, "signal"), (6, True, "signal"), (9, True, "crash")],
        # Slow, and compiled as the quick tests that build `straight` compile it (the two
        # compile settings round differently: tests/conftest.py).
        pytest.param(
            [(5, False, "crash"), (7, False, "signal"), (12, True, "crash")],
            marks=[pytest.mark.slow, pytest.mark.quick_compile],
        ),
    ],
)
def test_an_interrupted_run_resumed_repeats_the_straight_run(
    straight, cache, interruptions, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "run"
    command = [*RUN, *cache, "--out", str(out)]
    for iteration, evaluation, how in interruptions:
        interrupt_at(monkeypatch, iteration, evaluation, how)
        if how == "crash":
            with pytest.raises(Crash):
                main(command)
        else:
            assert main(command) == 130
        command = ["train", "--resume", str(out), "--no-progress", *cache]
    assert main(command) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert rows(out) == straight
