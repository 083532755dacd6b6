"""The code of the README and of the docs pages runs as written: the quickstart, then the blocks
that build on it. Each python block follows a marker naming the test that runs it."""

import pathlib
import re
import subprocess
import sys

import jax
import pytest
from helpers import DOC_PAGES, MARKED_BLOCK, ROOT, assert_trees_close, doc_block, users_environment

# The markers this file runs, and the one tests/test_multi_agent.py runs.
RUN_HERE = (
    "quickstart",
    "group",
    "stages",
    "checkpoints",
    "many-seeds",
    "offline",
    "recurrent",
    "normalization",
    "custom-trainer",
    "rllib-parity",
)
RUN_ELSEWHERE = ("multi-agent", "env-runners")
NOT_RUN = "not-run"  # a sketch with elided parts (docs/architecture.md), said so in its marker


def _block(marker):
    return doc_block(marker)[1]


def _run(marker, namespace):
    page, code = doc_block(marker)
    exec(compile(code, f"{page.name} {marker}", "exec"), namespace)
    return namespace


def test_every_python_block_is_run_by_a_test():
    markers = []
    for page in DOC_PAGES:
        text = page.read_text()
        marked = [match["marker"] for match in MARKED_BLOCK.finditer(text)]
        assert text.count("```python") == len(marked), f"{page.name}: a python block has no marker"
        markers += marked
    run = [marker for marker in markers if marker != NOT_RUN]
    assert sorted(run) == sorted(RUN_HERE + RUN_ELSEWHERE)


@pytest.fixture()
def quickstart():
    return _run("quickstart", {})


def test_quickstart_runs(quickstart):
    assert set(quickstart["metrics"]) == {"policy", "__all__"}
    assert int(quickstart["state"].updates) == 10


def test_all_devices_block_runs(quickstart):
    namespace = _run("group", quickstart)
    assert namespace["placed"].placement.num_devices == 8  # the fake devices of conftest.py
    assert int(namespace["single"].updates) == 13


def test_stages_block_runs_and_its_data_parallel_step_is_the_single_device_step(quickstart):
    namespace = _run("stages", quickstart)
    assert int(namespace["state"].updates) == 12  # 10 updates, one accumulated, one parallel
    # The shard_map step on the 8 fake devices equals the three stages on one device.
    learner, state = namespace["learner"], namespace["state"]
    single = jax.tree.map(lambda x: x.addressable_shards[0].data, state)
    batch = namespace["collect"]()
    parallel = namespace["step"](state, batch)
    grads, _ = learner.compute_gradients(single, batch)
    grads = learner.postprocess_gradients(single, grads)
    one_device = learner.apply_gradients(single, grads, env_steps=1024)
    parallel = jax.tree.map(lambda x: x.addressable_shards[0].data, parallel)
    assert_trees_close(parallel.modules, one_device.modules, rtol=1e-5, atol=1e-6)


def test_rllib_parity_block_runs(quickstart):
    # docs/guides/rllib.md: the postprocess hooks, filter_param_dict_for_optimizer,
    # compile_results and the results' counts, as its rows write them.
    namespace = _run("rllib-parity", quickstart)
    metrics = namespace["parity_metrics"]["policy"]
    assert float(metrics["largest_grad"]) > 0.01  # so the clipping to 0.01 did something
    assert max(float(abs(g).max()) for g in jax.tree.leaves(namespace["grads"])) <= 0.01
    assert float(metrics["learning_rate/default"]) == pytest.approx(3e-4)
    assert metrics["action_counts"].shape == (2,) and int(metrics["action_counts"].sum()) == 1024
    params = namespace["parity_state"].modules["policy"].params
    assert len(jax.tree.leaves(namespace["owned"])) == len(jax.tree.leaves(params))
    assert int(namespace["parity_state"].updates) == 2
    pair = namespace["pair_metrics"]
    assert int(pair["__all__"]["num_env_steps_trained"]) == 1024
    assert int(pair["red"]["num_env_steps_trained"]) == int(pair["blue"]["num_env_steps_trained"])


def test_checkpoints_block_runs_and_runs_again(quickstart):
    source = compile(_block("checkpoints"), "checkpoints", "exec")
    exec(source, quickstart)
    assert int(quickstart["state"].updates) == 11
    first = quickstart["run_dir"]
    exec(source, quickstart)  # pasted twice in one session: a new folder, no step clash
    assert int(quickstart["state"].updates) == 12 and quickstart["run_dir"] != first


def test_many_seeds_block_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the block saves a PNG in the working directory
    source = (
        _block("many-seeds")
        .replace("num_iterations=200, eval_interval=20", "num_iterations=2, eval_interval=1")
        .replace("num_seeds=32", "num_seeds=2")
        .replace("num_seeds=8", "num_seeds=1")
        .replace("[:, -1])  # [32]", "[:, -1])  # [2]")
    )
    namespace = {}
    exec(compile(source, "many-seeds", "exec"), namespace)
    assert namespace["metrics"]["eval/return_mean"].shape == (2, 2)
    assert namespace["result"].metrics["eval/return_mean"].shape[:2] == (4, 1)
    assert (tmp_path / "cartpole_32_seeds.png").stat().st_size > 0


def test_offline_block_runs_and_runs_again(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where tempfile.mkdtemp puts the dataset
    monkeypatch.setattr("tempfile.tempdir", None)
    first = _run("offline", {})["data_dir"]
    namespace = _run("offline", {})  # pasted twice: a new folder, no refusal to overwrite
    assert namespace["data_dir"] != first and first.startswith(str(tmp_path))
    assert (pathlib.Path(namespace["data_dir"]) / "episodes.npz").is_file()
    assert namespace["dataset"].num_episodes == 20
    assert namespace["history"][-1]["env_steps"] >= 20_000
    assert any("eval/return_mean" in h for h in namespace["history"])


def test_recurrent_block_runs():
    namespace = _run("recurrent", {})
    stats, trainer = namespace["stats"], namespace["trainer"]
    assert stats["env_steps"] == 1024 and trainer.engine.algorithm.config.use_lstm
    assert stats["default_policy/num_grad_steps"] == 8 * 4  # 8 epochs of 4 minibatches
    namespace["env"].close()
    trainer.close()


def test_normalization_block_runs():
    namespace = _run("normalization", {})
    moments = namespace["moments"]
    assert float(moments.count) == 256.0 and moments.mean.shape == (3,)
    namespace["trainer"].close()


def test_custom_trainer_block_trains_the_quickstart_learner(quickstart):
    namespace = _run("custom-trainer", quickstart)
    assert [stats["iteration"] for stats in namespace["history"]] == [1, 2, 3]
    assert int(namespace["trainer"].state.updates) == 3


@pytest.mark.slow
def test_the_readme_states_the_steps_the_embedded_default_takes(tmp_path):
    # "jaxlearner train ppo" as the README runs it, in a user's environment; the README's
    # figure is what its closing line says.
    text = " ".join((ROOT / "README.md").read_text().split())
    (claimed,) = re.findall(r"the embedded default, RL Zoo's settings: ([\d,]+) env steps", text)
    done = subprocess.run(
        [sys.executable, "-m", "jaxlearner_cli", "train", "ppo", "--no-progress"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=users_environment(),
    )
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("Done: ")]
    assert line.startswith(f"Done: {claimed} env steps in "), line
    assert line.endswith("two evaluations in a row at >= 475: reached."), line


def test_no_page_names_the_repository_address_that_does_not_exist():
    # github.com/jaxlearner/jaxlearner was never created: the docs name paths in the source
    # tree instead, and the site has no repository button.
    for page in [*DOC_PAGES, ROOT / "docs/conf.py"]:
        assert "github.com/jaxlearner" not in page.read_text(), page
