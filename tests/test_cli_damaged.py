"""The command line on a run whose newest checkpoint is damaged: one line, then the newest
intact step, nothing the run holds deleted or changed; ``--step N``; no intact step at all.

A damaged step (array files gone, metadata that is not JSON) is reported in one line
naming the step and what is wrong, and ``eval``, ``record`` and ``train --resume`` go on
with the newest intact step, saying so in one more line (exit status 0). A resume from
an older step than the newest continues in a new folder beside the run (``RUN-2``). A
step asked for with ``--step`` that is damaged, or a run without an intact step, is one
line and exit status 2. A symbolic link in a step stays a refusal (``test_bad_input``).
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
from helpers import TINY_PPO_OPTIONS
from helpers import refused as refused_by

from jaxlearner.cli import NO_CACHE_VARIABLE, main

TINY = ["--max-steps", "768", "--eval-every", "256", *TINY_PPO_OPTIONS]


@pytest.fixture(autouse=True)
def no_compilation_cache(monkeypatch):
    monkeypatch.setenv(NO_CACHE_VARIABLE, "1")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished run with checkpoint steps 1, 2 and 3."""
    out = tmp_path_factory.mktemp("runs") / "R"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(NO_CACHE_VARIABLE, "1")
        assert main(["train", "ppo", "--out", str(out), *TINY]) == 0
    assert sorted(p.name for p in (out / "checkpoints").iterdir() if p.name.isdigit()) == [
        "1",
        "2",
        "3",
    ]
    return out


@pytest.fixture
def run(trained, tmp_path):
    """A copy of the trained run, to damage."""
    copy = tmp_path / "R"
    shutil.copytree(trained, copy)
    return copy


def damage(run, step, how):
    """Damages one step: its array files deleted, or its metadata overwritten with non-JSON."""
    folder = run / "checkpoints" / str(step)
    if how == "arrays":
        arrays = [p for p in (folder / "state").rglob("*") if p.is_file() and p.parent.name == "d"]
        assert arrays
        for path in arrays:
            path.unlink()
    else:
        (folder / "jaxlearner" / "metadata").write_text("not json{")


def contents(run):
    """``{relative path: sha256}`` of every file the run holds (its lock file aside: it
    records which process holds the folder)."""
    return {
        str(path.relative_to(run)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(run.rglob("*"))
        if path.is_file() and path.name != ".jaxlearner.lock"
    }


def shell(*argv):
    """The command as a user types it (``python -m jaxlearner_cli ...``), without the cache."""
    env = {**os.environ, NO_CACHE_VARIABLE: "1"}
    return subprocess.run(
        [sys.executable, "-m", "jaxlearner_cli", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def lines(text):
    return [line for line in text.splitlines() if line.strip()]


WHAT = {"arrays": "is damaged: orbax's description", "metadata": "metadata of step 3 in"}


@pytest.mark.parametrize("how", ["arrays", "metadata"])
@pytest.mark.parametrize("command", ["eval", "record"])
def test_a_damaged_newest_step_is_one_line_then_the_newest_intact_one(run, how, command, tmp_path):
    damage(run, 3, how)
    before = contents(run)
    argv = [command, run, "--episodes", "1"]
    if command == "record":
        argv += ["--out", tmp_path / "data"]
    result = shell(*argv)
    assert result.returncode == 0, result.stderr[-3000:]
    err = lines(result.stderr)
    assert len(err) == 2 and "Traceback" not in result.stderr, result.stderr
    assert err[0].startswith(f"jaxlearner {command}: ") and WHAT[how] in err[0], err[0]
    assert "step 3" in err[0] and "tensorstore_spec" not in err[0], err[0]
    assert err[1] == (
        f"jaxlearner {command}: using checkpoint step 2, the newest intact one (the damaged "
        "steps [3] are left as they are)"
    )
    assert "checkpoint step 2" in result.stdout, result.stdout
    assert contents(run) == before  # nothing deleted or changed


@pytest.mark.parametrize("how", ["arrays", "metadata"])
def test_resume_past_a_damaged_newest_step_goes_on_beside_the_run(run, how):
    damage(run, 3, how)
    before = contents(run)
    result = shell("train", "--resume", run)
    assert result.returncode == 0, result.stderr[-3000:]
    err = lines(result.stderr)
    assert len(err) == 2 and "Traceback" not in result.stderr, result.stderr
    assert err[0].startswith("jaxlearner train: ") and WHAT[how] in err[0], err[0]
    beside = run.with_name("R-2")
    assert err[1] == (
        f"jaxlearner train: resuming from checkpoint step 2, the newest intact one, in a new "
        f"run folder {beside} ({run} is left as it is, its steps [3] included)"
    )
    opening, budget = lines(result.stdout)[:2]
    assert opening.endswith(f"from checkpoint step 2; run folder {beside}; compiling the update...")
    assert budget.startswith("From env step 512, stops at "), result.stdout
    assert contents(run) == before  # the damaged step and the metrics included
    info = json.loads((beside / "run.json").read_text())
    assert info["resumed_from"] == {"run": str(run), "step": 2}
    steps = sorted(int(p.name) for p in (beside / "checkpoints").iterdir() if p.name.isdigit())
    assert steps == [2, 3]  # the step it started from, then the one it trained
    records = [json.loads(line) for line in (beside / "metrics.jsonl").read_text().splitlines()]
    assert sorted({r["step"] for r in records}) == [1, 2, 3]
    # The iteration trained again is the one the damaged step held: resumes are exact.
    again = shell("eval", beside, "--episodes", "1")
    assert again.returncode == 0 and again.stderr == "", again.stderr
    assert "checkpoint step 3" in again.stdout


def test_resume_from_an_older_step_with_step_goes_on_beside_the_run(run):
    before = contents(run)
    result = shell("train", "--resume", run, "--step", "1", "--no-progress")
    assert result.returncode == 0, result.stderr[-3000:]
    beside = run.with_name("R-2")
    assert lines(result.stderr) == [
        f"jaxlearner train: resuming from checkpoint step 1, as --step asks, in a new run "
        f"folder {beside} ({run} is left as it is, its steps [2, 3] included)"
    ]
    assert contents(run) == before
    steps = sorted(int(p.name) for p in (beside / "checkpoints").iterdir() if p.name.isdigit())
    assert steps == [1, 2, 3]


def refused(argv, capsys, *fragments):
    """Runs ``main(argv)``; asserts exit 2 and one stderr line holding each fragment."""
    return refused_by(main, argv, capsys, *fragments)


def test_a_damaged_step_asked_for_and_no_intact_step_are_one_line(run, capsys, tmp_path):
    damage(run, 3, "arrays")
    before = contents(run)
    for command in (["eval", run, "--step", "3"], ["train", "--resume", run, "--step", "3"]):
        refused(command, capsys, "step 3", "choose another step with --step N (steps: [1, 2, 3])")
    damage(run, 2, "metadata")
    damage(run, 1, "arrays")
    before = contents(run)
    for command in (
        ["eval", run],
        ["record", run, "--episodes", "1", "--out", tmp_path / "data"],
        ["train", "--resume", run],
    ):
        refused(command, capsys, f"no intact checkpoint in {run / 'checkpoints'}", "[2, 1]")
    assert contents(run) == before and not run.with_name("R-2").exists()
    assert not (tmp_path / "data").exists()


def test_step_is_for_resume_only(capsys):
    refused(["train", "ppo", "--step", "2"], capsys, "--step 2 chooses the checkpoint --resume")
