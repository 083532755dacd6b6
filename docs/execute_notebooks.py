"""Runs the notebooks top to bottom with their own settings and saves their outputs in them.

The documentation renders the notebooks with the outputs they hold (``nb_execution_mode =
"off"`` in ``conf.py``): running them in every docs build would take minutes. Run this after
changing a notebook, or the code it shows, and commit the outputs:

    python docs/execute_notebooks.py                      # every notebook
    python docs/execute_notebooks.py notebooks/quickstart.ipynb

``tests/test_notebooks.py`` runs each one on every CI run, with a short budget, and holds the
saved outputs to what the code prints today: their words (metric keys, messages) to the short
run's, and the counts of quickstart's and custom_learner's (env steps, steps saved) to a run at
their own budget on the CPU. So run this on a CPU, without XLA flags (``XLA_FLAGS`` unset).
"""

import argparse
import os
import pathlib
import tempfile

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[1] / "notebooks"


def execute(path: pathlib.Path) -> None:
    """Runs one notebook in a fresh kernel, in a temporary folder, and writes it back."""
    notebook = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as folder:
        client = NotebookClient(
            notebook,
            timeout=1800,
            kernel_name="python3",
            record_timing=False,
            resources={"metadata": {"path": folder}},
        )
        client.execute()
    nbformat.write(notebook, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=pathlib.Path)
    paths = parser.parse_args().notebooks or sorted(NOTEBOOKS.glob("*.ipynb"))
    os.environ.pop("MPLBACKEND", None)  # the kernel's inline backend keeps the figures
    for path in paths:
        print(f"running {path}", flush=True)
        execute(path)


if __name__ == "__main__":
    main()
