"""Where the test suite's time goes: per test, its wall time and JAX's compilation inside it.

A pytest plugin and a summary. Run the suite with it (CI's command plus the plugin)::

    PROFILE_TESTS_DIR=/tmp/prof PYTHONPATH=benchmarks python -m pytest -p profile_tests -q
    python benchmarks/profile_tests.py /tmp/prof [--top 25] [--slow-ids FILE]

Each test process appends one JSON line per test to ``$PROFILE_TESTS_DIR/tests-<pid>.jsonl``:
``{"id", "wall", "<event>": seconds, "<event>#n": count}`` for JAX's ``jax.monitoring``
events seen during the test (setup, call and teardown): tracing
(``jaxpr_trace_duration``), lowering to StableHLO (``jaxpr_to_mlir_module_duration``), XLA's
compile (``backend_compile_duration``, which also counts persistent-cache reads) and the
persistent cache's hits and the compile time they saved. Only the test processes are seen:
commands, notebooks and Ray actors the tests start compile in processes of their own, so
their time is in ``wall`` only. The summary prints the totals and the files that take the most
time, with their compile share; ``--slow-ids`` (one test id a line, as
``pytest --collect-only -q -m slow`` prints them) splits the totals by the ``slow`` marker.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import time

TRACE = "/jax/core/compile/jaxpr_trace_duration"
LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"
BACKEND = "/jax/core/compile/backend_compile_duration"
HITS = "/jax/compilation_cache/cache_hits#n"
SAVED = "/jax/compilation_cache/compile_time_saved_sec"

_seen: collections.defaultdict[str, float] = collections.defaultdict(float)
_listening = False


def _duration(event, seconds, **kwargs):
    _seen[event] += seconds
    _seen[event + "#n"] += 1


def _event(event, **kwargs):
    _seen[event + "#n"] += 1


def _listen():
    global _listening
    if not _listening:
        import jax.monitoring

        jax.monitoring.register_event_duration_secs_listener(_duration)
        jax.monitoring.register_event_listener(_event)
        _listening = True


try:
    import pytest
except ImportError:  # the summary needs no pytest
    pytest = None

if pytest is not None:

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        """Times one test (setup, call, teardown) and the compilation events inside it."""
        _listen()
        _seen.clear()
        start = time.perf_counter()
        yield
        record = {"id": item.nodeid, "wall": time.perf_counter() - start, **_seen}
        folder = pathlib.Path(os.environ.get("PROFILE_TESTS_DIR", "profile_tests"))
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"tests-{os.getpid()}.jsonl", "a") as out:
            out.write(json.dumps(record) + "\n")


def load(folder: pathlib.Path) -> list[dict]:
    """Every test's record from the plugin's files in ``folder``."""
    return [json.loads(line) for path in folder.glob("tests-*.jsonl") for line in open(path)]


def totals(records: list[dict]) -> dict[str, float]:
    """Summed seconds: wall, XLA compile, tracing + lowering; and the cache's hits and saving."""
    add = lambda key: sum(r.get(key, 0.0) for r in records)
    return {
        "tests": len(records),
        "wall": add("wall"),
        "backend": add(BACKEND),
        "trace_lower": add(TRACE) + add(LOWER),
        "compiles": add(BACKEND + "#n"),
        "hits": add(HITS),
        "saved": add(SAVED),
    }


def by_file(records: list[dict]) -> list[tuple[str, dict[str, float]]]:
    """:func:`totals` per test file, the slowest first."""
    files = collections.defaultdict(list)
    for record in records:
        files[record["id"].split("::")[0]].append(record)
    rows = [(name, totals(group)) for name, group in files.items()]
    return sorted(rows, key=lambda row: -row[1]["wall"])


def _line(name: str, t: dict[str, float]) -> str:
    share = (t["backend"] + t["trace_lower"]) / max(t["wall"], 1e-9)
    return (
        f"| {name} | {t['tests']} | {t['wall']:.0f} | {t['backend']:.0f} | "
        f"{t['trace_lower']:.0f} | {share:.0%} | {t['compiles']:.0f} | {t['hits']:.0f} |"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=pathlib.Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--slow-ids", type=pathlib.Path)
    args = parser.parse_args()
    records = load(args.folder)
    if not records:
        raise SystemExit(f"no tests-*.jsonl in {args.folder}: run pytest with -p profile_tests")
    print(
        "| tests | count | wall (s) | XLA compile (s) | trace + lower (s) | compile share |"
        " compiles | cache hits |\n|---|---|---|---|---|---|---|---|"
    )
    print(_line("all", totals(records)))
    if args.slow_ids:
        slow = set(args.slow_ids.read_text().split())
        print(_line("marked slow", totals([r for r in records if r["id"] in slow])))
        print(_line("not slow", totals([r for r in records if r["id"] not in slow])))
    for name, t in by_file(records)[: args.top]:
        print(_line(f"`{name}`", t))
    saved = totals(records)["saved"]
    print(f"\npersistent-cache hits saved {round(saved)} s of XLA compile (JAX's estimate)")


if __name__ == "__main__":
    main()
