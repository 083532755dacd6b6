"""A run folder nothing can damage, as a user meets it from the shell.

Reusing a folder, tearing ``metrics.jsonl`` and ``run.json``, and two writers at once.
"""

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest
from helpers import environ_without_compilation_cache

from jaxlearner.files import JSONLinesError, read_json_lines, write_atomic
from jaxlearner.folder_lock import LOCK_FILE, FolderBusyError, FolderLock

TINY = [
    "--num-envs",
    "4",
    "--no-progress",
    "--eval-every",
    "1024",
    "--config",
    "train_batch_size=256",
    "minibatch_size=128",
    "num_epochs=1",
    "hidden_sizes=[8]",
]


def shell(*argv, timeout=300):
    """``python -m jaxlearner ARGV``, as a user types it."""
    return subprocess.run(
        [sys.executable, "-m", "jaxlearner", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def snapshot(run):
    """Every file in a run folder, by path, with its bytes (its lock files' pids included)."""
    return {p.relative_to(run).as_posix(): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file()}  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "R"
    result = shell("train", "ppo", "--max-steps", "512", "--out", out, *TINY)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def one_line_error(result, *fragments):
    assert result.returncode == 2, (result.stdout[-2000:], result.stderr[-3000:])
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def test_reusing_a_folder_is_refused_and_the_run_in_it_is_untouched(run):
    before = snapshot(run)
    result = shell("train", "ppo", "--max-steps", "256", "--out", run, *TINY)
    one_line_error(result, f"--out {run} holds a run already", f"--resume {run}", "--new-run")
    assert snapshot(run) == before


def test_a_refused_resume_leaves_the_folder_and_its_lock_as_they_were(run):
    before = snapshot(run)
    one_line_error(shell("train", "--resume", run, "--step", "999"), "999")
    assert snapshot(run) == before


def test_new_run_starts_beside_the_old_one(run, tmp_path):
    before = snapshot(run)
    result = shell("train", "ppo", "--max-steps", "256", "--out", run, "--new-run", *TINY)
    assert result.returncode == 0, result.stderr[-3000:]
    beside = run.with_name(f"{run.name}-2")
    assert f"run folder {beside}" in result.stdout
    assert json.loads((beside / "run.json").read_text())["max_steps"] == 256
    rows = read_json_lines(beside / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 1]  # the iteration, then its closing evaluation
    assert "eval/return_mean" in rows[1]
    assert snapshot(run) == before  # nothing a run wrote is overwritten or appended to


def tear(path, text):
    data = path.read_bytes()
    path.write_bytes(data + text.encode())
    return data


def test_a_torn_metrics_line_is_skipped_and_resume_cuts_it(run, tmp_path):
    metrics = run / "metrics.jsonl"
    whole = tear(metrics, '{"step": 3, "env_steps": 76')  # killed while appending
    try:
        result = shell("plot", run, "--out", tmp_path / "curve.png")
        assert result.returncode == 0, result.stderr
        assert result.stderr.count("\n") == 1 and "cut short" in result.stderr, result.stderr
        assert f"{metrics}: skipped its last line" in result.stderr
        result = shell("train", "--resume", run)
        assert result.returncode == 0, result.stderr[-3000:]
        assert "is complete" in result.stdout
        assert metrics.read_bytes() == whole  # the torn line cut off, the rest as it was
    finally:
        metrics.write_bytes(whole)


def test_a_damaged_metrics_line_is_one_line_naming_file_and_line(run, tmp_path):
    metrics = run / "metrics.jsonl"
    whole = metrics.read_bytes()
    lines = whole.decode().splitlines(keepends=True)
    metrics.write_text(lines[0] + "garbage\n" + "".join(lines[1:]))
    try:
        for argv in (["plot", run, "--out", tmp_path / "curve.png"], ["train", "--resume", run]):
            one_line_error(shell(*argv), f"{metrics}, line 2: not a JSON object")
    finally:
        metrics.write_bytes(whole)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"algorithm": "ppo", "env": "CartPole', "run.json cannot be read"),
        ("[1, 2]", "holds list, not a JSON object"),
        ('{"algorithm": "ppo"}', "is damaged: it has no 'env'"),
    ],
    ids=["torn", "not-an-object", "missing-key"],
)
def test_an_invalid_run_json_is_one_line_from_every_command(run, tmp_path, content, message):
    info = run / "run.json"
    whole = info.read_bytes()
    info.write_text(content)
    try:
        for argv in (
            ["eval", run, "--episodes", "1"],
            ["plot", run, "--out", tmp_path / "curve.png"],
            ["train", "--resume", run],
            ["record", run, "--episodes", "1", "--out", tmp_path / "data"],
        ):
            one_line_error(shell(*argv), message)
    finally:
        info.write_bytes(whole)


def test_a_resume_missing_a_setting_is_one_line(run):
    info = run / "run.json"
    whole = info.read_bytes()
    recorded = json.loads(whole)
    del recorded["max_steps"]
    info.write_text(json.dumps(recorded))
    try:
        one_line_error(shell("train", "--resume", run), "is damaged: it has no 'max_steps'")
    finally:
        info.write_bytes(whole)


def test_a_live_run_owns_its_folder(tmp_path):
    out = tmp_path / "live"
    env = environ_without_compilation_cache()  # killed at the end, maybe mid-write to it
    budget = ["--max-steps", "1000000", "--stop-reward", "100000"]
    live = subprocess.Popen(
        [sys.executable, "-m", "jaxlearner", "train", "ppo", "--out", str(out), *budget, *TINY],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        while not (out / "run.json").is_file():
            assert live.poll() is None and time.monotonic() < deadline, live.communicate()
            time.sleep(0.1)
        before = (out / "run.json").read_bytes()
        owner = f"a running jaxlearner (pid {live.pid}) writes this folder"
        one_line_error(shell("train", "--resume", out), f"--resume {out}: {owner}")
        one_line_error(shell("train", "ppo", "--out", out, *TINY), f"--out {out}: {owner}")
        assert (out / "run.json").read_bytes() == before
        assert live.poll() is None  # the live run goes on
    finally:
        live.kill()
        live.wait()
    with FolderLock(out, "test"):  # its death released the lock
        pass


def test_write_atomic_replaces_whole_files_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "run.json"
    write_atomic(target, "old\n")
    write_atomic(target, "new\n")
    assert target.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "missing" / "run.json", "x")


def test_read_json_lines_torn_tail_and_damaged_middle(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1}\n\n{"step": 2}\n{"step": 3, "x": ')
    notices = []
    assert read_json_lines(path, notice=notices.append) == [{"step": 1}, {"step": 2}]
    assert notices == [
        f"note: {path}: skipped its last line 4, cut short (a run stopped while writing it)"
    ]
    path.write_text('{"step": 1}\n{"step": 2}\n')
    assert read_json_lines(path, notice=notices.append) == [{"step": 1}, {"step": 2}]
    assert len(notices) == 1
    path.write_text('{"step": 1}\n{"st\n{"step": 3}\n')
    with pytest.raises(JSONLinesError, match=rf"{path}, line 2: not a JSON object"):
        read_json_lines(path)


def test_a_folder_lock_is_exclusive_within_one_process(tmp_path):
    first = FolderLock(tmp_path, "run").acquire()
    with pytest.raises(FolderBusyError, match=rf"another run \(pid {os.getpid()}\)"):
        FolderLock(tmp_path, "run").acquire()
    first.release()
    with FolderLock(pathlib.Path(tmp_path), "run") as again:
        assert again.held
    assert not again.held


def test_an_unclaimed_lock_leaves_its_file_as_it_was_until_claimed(tmp_path):
    (tmp_path / LOCK_FILE).write_text('{"pid": 1}')  # left by a writer that has exited
    lock = FolderLock(tmp_path, "run").acquire(claim=False)
    assert lock.held and (tmp_path / LOCK_FILE).read_text() == '{"pid": 1}'
    with pytest.raises(FolderBusyError, match=r"another run \(pid 1\)"):
        FolderLock(tmp_path, "run").acquire()  # held all the same; the file names pid 1
    lock.claim()
    assert (tmp_path / LOCK_FILE).read_text() == f'{{"pid": {os.getpid()}}}'
    lock.release()
