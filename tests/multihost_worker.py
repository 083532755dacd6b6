"""One process of the two-process test in test_group.py (run as a script, not collected).

Usage: python multihost_worker.py PORT PROCESS_ID OUT_FILE
Each process has 4 fake CPU devices; together they form one 8-device mesh.
"""

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax
import numpy as np

import jaxlearner as jl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from group_problem import UPDATES, global_batch, make_learner


def main() -> None:
    port, process_id, out_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    jl.distributed.initialize(
        f"127.0.0.1:{port}", num_processes=2, process_id=process_id, timeout_seconds=60
    )
    assert jax.device_count() == 8 and jax.local_device_count() == 4
    learner = make_learner()
    group = jl.LearnerGroup(learner)
    batch = global_batch()
    rows = {m: jax.tree.leaves(b)[0].shape[0] // 2 for m, b in batch.items()}
    local = {
        m: jax.tree.map(lambda x, n=rows[m]: x[process_id * n : (process_id + 1) * n], b)
        for m, b in batch.items()
    }
    state = group.init(jax.random.key(0), local)
    for _ in range(UPDATES):
        state, metrics = group.update(state, local)
    host = jax.device_get(group.placement.get(state).modules)
    flat = {
        jax.tree_util.keystr(p): np.asarray(x) for p, x in jax.tree_util.tree_leaves_with_path(host)
    }
    flat["total_loss"] = np.asarray(jax.device_get(metrics["__all__"]["total_loss"]).item())
    np.savez(out_file, **flat)
    jl.distributed.shutdown()


if __name__ == "__main__":
    main()
