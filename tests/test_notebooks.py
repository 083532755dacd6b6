"""Every notebook runs top to bottom, with its 'parameters' cell overridden by a short budget."""

import os
import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[1] / "notebooks"

# Short budgets for CI, injected after each notebook's cell tagged "parameters" (as papermill
# does); the notebooks' own defaults train to the reward threshold.
SHORT_BUDGETS = {
    "quickstart.ipynb": 'MAX_ENV_STEPS = 4096\nEVAL_EVERY = 2048\nCHECKPOINT_DIR = "{tmp}/ckpt"',
    "custom_learner.ipynb": 'NUM_UPDATES = 6\nBATCH_SIZE = 512\nCHECKPOINT_DIR = "{tmp}/ckpt"',
    "many_seeds.ipynb": (
        "NUM_SEEDS = 2\nNUM_ITERATIONS = 4\nEVAL_INTERVAL = 2\nLEARNING_RATES = (3e-4, 1e-3)"
    ),
}


def with_parameters(notebook, overrides):
    """The notebook with ``overrides`` in a new cell after its 'parameters' cell."""
    for index, cell in enumerate(notebook.cells):
        if "parameters" in cell.metadata.get("tags", []):
            injected = nbformat.v4.new_code_cell(overrides)
            injected.metadata["tags"] = ["injected-parameters"]
            notebook.cells.insert(index + 1, injected)
            return notebook
    raise AssertionError("the notebook has no cell tagged 'parameters'")


def test_every_notebook_has_a_short_budget():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(
        name for name in SHORT_BUDGETS if (NOTEBOOKS / name).exists()
    )


@pytest.mark.parametrize("name", sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")))
def test_notebook_holds_the_outputs_the_docs_render(name):
    # docs/conf.py renders the saved outputs (docs/execute_notebooks.py writes them).
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    outputs = [output for cell in notebook.cells for output in cell.get("outputs", [])]
    assert any("image/png" in output.get("data", {}) for output in outputs), name
    assert not [output for output in outputs if output["output_type"] == "error"], name


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")))
def test_notebook_runs(name, tmp_path):
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    notebook = with_parameters(notebook, SHORT_BUDGETS[name].format(tmp=tmp_path))
    os.environ.setdefault("MPLBACKEND", "Agg")
    client = NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    )
    client.execute()
    errors = [
        output
        for cell in notebook.cells
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]
    assert not errors
