"""Every notebook runs top to bottom, with its 'parameters' cell overridden by a short budget;
its install cell installs a wheel built from this checkout, as it would on Colab."""

import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import types

import nbformat
import pytest
from helpers import users_environment
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"

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


# The notebooks whose saved outputs a test compares with a run at their own budgets, figures
# and all (many_seeds.ipynb takes minutes: its outputs' words are compared at the short budget).
FULL_RUNS = ("custom_learner.ipynb", "quickstart.ipynb")


def _execute(notebook, folder, env=None):
    """Runs ``notebook`` in a fresh kernel in ``folder``; its errors, if any."""
    environment = {**(os.environ if env is None else env), "MPLBACKEND": "Agg"}  # no windows
    client = NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": folder}}
    )
    client.execute(env=environment)
    return [
        output
        for cell in notebook.cells
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]


def _parameters(source):
    """The string parameters a parameters cell sets (paths), by name."""
    values = {}
    exec(source, values)
    return {name: value for name, value in values.items() if isinstance(value, str)}


def printed(notebook, parameters):
    """Each code cell's printed text (streams and plain-text results; figures left out: the
    tests draw them with Agg, which shows none), with the string parameters' values (the
    checkpoint folder) written as their names."""
    texts = []
    for cell in notebook.cells:
        if cell.cell_type != "code" or "injected-parameters" in cell.metadata.get("tags", []):
            continue
        text = "".join(
            output.get("text", "") + output.get("data", {}).get("text/plain", "")
            for output in cell.get("outputs", [])
            if "image/png" not in output.get("data", {})
        )
        for name, value in parameters.items():
            text = text.replace(value, name)
        texts.append(text)
    return texts


def words(text):
    """The names a printed text holds (metric keys, messages), numbers left out."""
    return sorted(set(re.findall(r"[A-Za-z_][\w/]*", re.sub(r"\d[\d.]*(e[-+]?\d+)?", "#", text))))


def figures(text):
    """A printed text with every decimal number (times, returns, losses: their roundings
    depend on the CPU) as ``#``: the counts (env steps, steps saved, shapes) stay."""
    return re.sub(r"\d+\.\d*(e[-+]?\d+)?", "#", text)


def _saved(name):
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    return notebook, _parameters(
        next(c for c in cells if "parameters" in c.metadata.get("tags", [])).source
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")))
def test_notebook_runs_and_its_saved_outputs_say_what_it_prints_today(name, tmp_path):
    saved, own = _saved(name)
    overrides = SHORT_BUDGETS[name].format(tmp=tmp_path)
    notebook = with_parameters(nbformat.read(NOTEBOOKS / name, as_version=4), overrides)
    assert not _execute(notebook, tmp_path)
    # The saved outputs' words are today's: metric keys, messages (docs/execute_notebooks.py).
    now = [words(text) for text in printed(notebook, _parameters(overrides))]
    assert [words(text) for text in printed(saved, own)] == now


@pytest.mark.slow
@pytest.mark.parametrize("name", FULL_RUNS)
def test_notebook_saved_figures_are_what_it_prints_today(name, tmp_path):
    # At the notebook's own budget, in a user's environment (no fake devices): the counts it
    # saved (env steps to the reward, checkpoint steps) are the ones it prints today.
    saved, own = _saved(name)
    overrides = f'CHECKPOINT_DIR = "{tmp_path}/ckpt"'
    notebook = with_parameters(nbformat.read(NOTEBOOKS / name, as_version=4), overrides)
    assert not _execute(notebook, tmp_path, env=users_environment())
    now = printed(notebook, _parameters(overrides))
    assert [figures(text) for text in printed(saved, own)] == [figures(text) for text in now]


def _install_cell(name):
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    (cell,) = [
        cell for cell in notebook.cells if 'if "google.colab" in sys.modules:' in cell.source
    ]
    return cell.source


class FakeIPython:
    """``get_ipython()`` of a Colab kernel: ``%pip install ...`` lines recorded; with
    ``target``, run for real into that folder (no dependencies: the test's own are there)."""

    def __init__(self, target=None):
        self.pip, self._target = [], target

    def run_line_magic(self, magic, line):
        assert magic == "pip"
        self.pip.append(shlex.split(line))
        if self._target is not None:
            command = [sys.executable, "-m", "pip", *shlex.split(line), "--no-deps"]
            subprocess.run([*command, "--target", str(self._target)], check=True)


def _run_install_cell(monkeypatch, folder, ipython, source=None):
    """The notebooks' install cell, run in ``folder`` as on a Colab CPU runtime."""
    monkeypatch.chdir(folder)
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    for name in ("COLAB_TPU_ADDR", "TPU_ACCELERATOR_TYPE", "JAXLEARNER_SOURCE"):
        monkeypatch.delenv(name, raising=False)
    if source is not None:
        monkeypatch.setenv("JAXLEARNER_SOURCE", source)
    monkeypatch.setattr(shutil, "which", lambda name, *args, **kwargs: None)  # no GPU
    code = _install_cell("quickstart.ipynb")
    exec(compile(code, "install cell", "exec"), {"get_ipython": lambda: ipython})


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """A wheel of this checkout, built as the install cell tells a user to build one."""
    folder = tmp_path_factory.mktemp("dist")
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(folder), str(ROOT)]
    # Offline with the environment's setuptools where it is recent enough, else pip's own build.
    if subprocess.run([*build, "--no-build-isolation"], capture_output=True).returncode != 0:
        subprocess.run(build, check=True)
    (built,) = folder.glob("jaxlearner-*.whl")
    return built


def test_every_notebook_has_the_same_install_cell_naming_no_repository():
    cells = {name: _install_cell(name) for name in SHORT_BUDGETS}
    assert len(set(cells.values())) == 1, sorted(cells)
    for name in SHORT_BUDGETS:  # no address of a repository that does not exist, badge or cell
        text = (NOTEBOOKS / name).read_text()
        assert not re.search(r"github\.com/(?!<you>)[\w-]+/jaxlearner", text), name


def test_the_install_cell_installs_an_uploaded_wheel(wheel, tmp_path, monkeypatch):
    session = tmp_path / "content"  # Colab's folder, where an uploaded file lands
    session.mkdir()
    shutil.copy(wheel, session)
    ipython = FakeIPython(target=tmp_path / "site")
    _run_install_cell(monkeypatch, session, ipython)
    assert ipython.pip == [["install", "-q", wheel.name]]  # nothing else on a CPU runtime
    installed = subprocess.run(
        [sys.executable, "-c", "import jaxlearner, jaxlearner_cli; print(jaxlearner.__file__)"],
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert pathlib.Path(installed).is_relative_to(tmp_path / "site"), installed


def test_the_install_cell_takes_a_source_and_says_what_it_needs_without_one(tmp_path, monkeypatch):
    url = "git+https://example.org/someone/jaxlearner@branch"
    ipython = FakeIPython()
    _run_install_cell(monkeypatch, tmp_path, ipython, source=url)
    assert ipython.pip == [["install", "-q", url]]
    with pytest.raises(RuntimeError, match=r"no jaxlearner-\*\.whl in .* and no JAXLEARNER_SOURCE"):
        _run_install_cell(monkeypatch, tmp_path, FakeIPython())
    # Outside Colab the cell installs nothing.
    monkeypatch.delitem(sys.modules, "google.colab")
    ipython = FakeIPython()
    code = compile(_install_cell("quickstart.ipynb"), "install", "exec")
    exec(code, {"get_ipython": lambda: ipython})
    assert ipython.pip == []
