"""Counts the kernels each loop body of a compiled program launches, from its optimized HLO.

On a GPU every top-level instruction of a while body that is not bookkeeping (a fusion, a
custom call such as a cuBLAS matmul, a copy, a collective) is about one kernel launch per
iteration, so for latency-bound programs (PPO's 930 minibatch steps of 128 rows, purejaxrl's
rollouts of 4 environments) this count is the cost model. Run:
``python benchmarks/hlo_kernels.py [--what update anakin]``; prints one table per program,
the loop bodies by kernel count, largest first, for jaxlearner and its hand-written peer.
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import re
import sys

import jax

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

FREE = {"parameter", "get-tuple-element", "tuple", "constant", "bitcast", "after-all"}
_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$")
_INSTRUCTION = re.compile(r"=\s*[^=]*?\s([a-z][\w\-]*)\(")
_WHILE_BODY = re.compile(r"\swhile\(.*body=%?([\w.\-]+)")


def loop_bodies(hlo_text: str) -> dict[str, collections.Counter]:
    """``{body computation: Counter(opcode -> count)}`` of every while loop's body."""
    computations, current = {}, None
    for line in hlo_text.splitlines():
        match = _COMPUTATION.match(line)
        if match:
            current = computations.setdefault(match.group(1), [])
        elif current is not None and line.strip() and line.strip() != "}":
            current.append(line)
    bodies = {}
    for lines in computations.values():
        for line in lines:
            body = _WHILE_BODY.search(line)
            if body and body.group(1) in computations:
                opcodes = collections.Counter()
                for inner in computations[body.group(1)]:
                    op = _INSTRUCTION.search(inner)
                    if op and op.group(1) not in FREE:
                        opcodes[op.group(1)] += 1
                bodies[body.group(1)] = opcodes
    return bodies


def report(name: str, compiled, dump: pathlib.Path | None = None) -> None:
    text = compiled.as_text()
    if dump is not None:
        dump.mkdir(parents=True, exist_ok=True)
        (dump / (re.sub(r"[^\w]+", "_", name).strip("_") + ".hlo.txt")).write_text(text)
    bodies = loop_bodies(text)
    print(f"\n{name}: {len(bodies)} loop bodies")
    for body, ops in sorted(bodies.items(), key=lambda kv: -sum(kv[1].values()))[:6]:
        print(f"  {sum(ops.values()):4d} kernels  {body}: {dict(ops.most_common(8))}")


def update_programs():
    import ppo_workload as w

    batch = w.make_batch()
    learner = w.make_learner()
    state = learner.init(jax.random.key(0))
    hand, carry = w.make_hand_written(learner, state.modules[w.MODULE_ID])
    yield "learner.update", jax.jit(learner.update).lower(state, batch).compile()
    yield "hand-written jit", hand.lower(carry, batch).compile()


def anakin_programs():
    import bench_anakin as b
    import fused_ppo

    keys = jax.random.split(jax.random.key(0), 1)
    for name, train in b.peer_trains(fused_ppo.PURE_JAX_RL).items():
        yield name, jax.jit(jax.vmap(train)).lower(keys).compile()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--what", nargs="+", default=["update", "anakin"])
    parser.add_argument("--dump", type=pathlib.Path, help="write each optimized HLO here")
    args = parser.parse_args()
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}")
    programs = {"update": update_programs, "anakin": anakin_programs}
    for what in args.what:
        for name, compiled in programs[what]():
            report(name, compiled, args.dump)


if __name__ == "__main__":
    main()
