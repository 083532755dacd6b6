"""The import graph: each outside library enters through its own modules; the core needs none."""

import ast
import pathlib
import re
import subprocess
import sys
import tomllib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "jaxlearner"

# Which of the package's modules may import each outside library (paths relative to it).
ALLOWED = {
    "orbax": {"checkpoint/manager.py"},
    "gymnasium": {
        "training/env_runner.py",
        "training/ray_runners.py",
        "training/vector_env.py",
        "training/atari.py",
        "cli/run_settings.py",
        "cli/evaluate.py",
        "training/multi_agent/env.py",
        "algorithms/*",
        "anakin/envs/*",
    },
    "ale_py": {"training/atari.py"},
    "ray": {"training/ray_runners.py"},
    "cv2": {"training/atari.py"},
    "matplotlib": {"cli/plot.py", "training/outputs/plotting.py"},
    "tensorboardX": {"training/outputs/loggers.py"},
    "mlflow": {"training/outputs/loggers.py"},
    "wandb": {"training/outputs/wandb_writer.py"},
    "tqdm": {"training/outputs/loggers.py"},
    "gymnax": {"anakin/envs/gymnax.py"},
    "pettingzoo": {"training/multi_agent/env.py"},
    "PIL": {"training/outputs/video.py"},
    "imageio": {"training/outputs/video.py"},
    "imageio_ffmpeg": {"training/outputs/video.py"},
    "minari": {"training/offline/minari_datasets.py"},
}


def imported_roots(path):
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def allowed(relative, patterns):
    return any(
        relative == p or (p.endswith("/*") and relative.startswith(p[:-1])) for p in patterns
    )


def test_outside_libraries_enter_through_their_modules():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        for library in imported_roots(path) & set(ALLOWED):
            if not allowed(relative, ALLOWED[library]):
                offenders.append(f"{relative} imports {library}")
    assert not offenders


def test_the_learner_core_runs_without_orbax_or_gymnasium():
    script = """
import sys
import flax.linen as nn, jax, jax.numpy as jnp, numpy as np, optax
import jaxlearner as jl

def loss(params, batch, ctx):
    return jnp.mean((ctx.apply(params, batch["x"])[:, 0] - batch["y"]) ** 2), {}

learner = jl.Learner({"m": jl.ModuleSpec(nn.Dense(1), loss, optax.adam(1e-3))}, minibatch_size=8)
batch = {"x": np.ones((16, 3), np.float32), "y": np.zeros(16, np.float32)}
state = learner.init(jax.random.key(0), batch)
state, metrics = learner.update(state, batch)
group = jl.LearnerGroup(learner)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("orbax", "gymnasium", "tensorstore"))
print(loaded)
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_lazy_exports_resolve():
    import jaxlearner as jl

    assert jl.Trainer.__name__ == "Trainer"
    assert jl.CheckpointManager.__name__ == "CheckpointManager"
    assert callable(jl.algorithms.ppo)
    for name in jl.__all__:
        if name != "anakin" or (PACKAGE / "anakin.py").exists():
            assert getattr(jl, name) is not None, name


def module_name(path, package=PACKAGE):
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path, modules, package=PACKAGE):
    """The package's modules that ``path`` imports, wherever the import statement stands.

    Every ``import`` and ``from ... import`` node of the file counts: at module level, in
    TYPE_CHECKING blocks and inside functions. A function-local import runs later than a
    module-level one, but it is a dependency all the same: an upward one inside a function
    is still a lower layer that cannot work without a higher one. ``from a import b`` names
    the module ``a.b`` when there is one, else ``a``. Importing ``a.b.c`` also runs the
    enclosing subpackage ``a.b``, counted unless it encloses ``path`` itself; the root
    package is counted only where it is named, since it runs first for every submodule
    whatever imports what.
    """
    name = module_name(path, package)
    own_package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = own_package.rsplit(".", node.level - 1)[0]
                base = f"{parent}.{base}" if base else parent
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                targets.add(submodule if submodule in modules else base)
    imported = set()
    for target in targets:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target:
            imported.add(target)
        enclosing = target.rpartition(".")[0]
        while "." in enclosing:  # a subpackage, not the root
            if not name.startswith(f"{enclosing}."):  # path's own package is running already
                imported.add(enclosing)
            enclosing = enclosing.rpartition(".")[0]
    return imported - {name}


def import_graph(package=PACKAGE):
    """``{module: the package's modules it imports}`` for every module of ``package``."""
    paths = sorted(package.rglob("*.py"))
    modules = {module_name(path, package) for path in paths}
    return {module_name(path, package): imported_modules(path, modules, package) for path in paths}


def cycles(graph):
    """The strongly connected components of more than one module, each sorted."""
    reach = {}
    for start in graph:
        seen, todo = set(), [start]
        while todo:
            for target in graph.get(todo.pop(), ()):
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        reach[start] = seen
    components = {
        tuple(sorted({start} | {other for other in reach[start] if start in reach[other]}))
        for start in graph
    }
    return sorted(list(c) for c in components if len(c) > 1)


def test_cycles_finds_strongly_connected_components():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": set()}
    assert cycles(graph) == [["a", "b", "c"], ["d", "e"]]


def test_the_package_modules_form_no_import_cycle():
    """No cycle among jaxlearner's modules through any import, function-local ones included.

    Imports of the root package ``jaxlearner`` from inside it count; the root's own lazy
    exports go through ``importlib`` and are not imports here.
    """
    graph = import_graph()
    assert graph["jaxlearner.algorithms"] >= {"jaxlearner.algorithms.builtin"}
    assert cycles(graph) == []


# Each sub-package may import from the layers before it in this list (and from its own).
LAYERS = [
    {"types", "errors", "files", "folder_lock"},
    {"core"},
    {"algorithms", "checkpoint"},
    {"training", "anakin"},
    {"cli"},
]


# A module whose concept moved up a layer and that stays behind only so that its old import
# path (``python -m jaxlearner.training.cli``) keeps working belongs to the layer it forwards
# to: its imports are checked as that layer's, and nothing below that layer may import it.
FORWARDERS = {"jaxlearner.training.cli": "cli"}


def layer_of(module):
    """The index in LAYERS of a module's sub-package (or of the sub-package a forwarder
    forwards to); None for the root package."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "__main__":
        return None  # jaxlearner/__init__.py re-exports every layer; __main__ runs the CLI
    home = FORWARDERS.get(module, parts[1])
    return next(i for i, names in enumerate(LAYERS) if home in names)


def upward_imports(package=PACKAGE):
    """``"a imports b"`` for each import, anywhere in a module, that breaks the layer rule.

    A module may import its own layer's sub-package and the layers before it, not a sibling
    in the middle layer (algorithms/ and checkpoint/ stand beside each other), and not the
    root package, which re-exports every layer.
    """
    upward = []
    for source, targets in sorted(import_graph(package).items()):
        if layer_of(source) is None:
            continue
        for target in sorted(targets):
            if layer_of(target) is None:
                upward.append(f"{source} imports the root package")
                continue
            same_layer = layer_of(target) == layer_of(source)
            sibling = same_layer and target.split(".")[1] != source.split(".")[1]
            if layer_of(target) > layer_of(source) or (sibling and layer_of(source) == 2):
                upward.append(f"{source} imports {target}")
    return upward


def test_layers_import_downward_only():
    """core/ needs no algorithm, checkpoint or driver; algorithms/ and checkpoint/ need no driver
    and not each other; training/ and anakin/ sit above them, and cli/ (the command line, an
    application of the library) on top. Every import counts, those inside functions
    included."""
    assert upward_imports() == []


def test_the_command_line_imports_modules_not_the_root_package():
    """``jaxlearner/cli/`` names the module that defines what it uses, at any depth, so the
    layer test above sees its real dependencies (``import jaxlearner as jl`` would hide them)."""
    offenders = []
    for path in sorted((PACKAGE / "cli").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            offenders += [f"{path.name}:{node.lineno}" for name in names if name == "jaxlearner"]
    assert offenders == []


def write_package(root, files):
    for relative, source in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return root / "pkg"


def test_a_function_local_upward_import_is_caught(tmp_path):
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/core/__init__.py": "",
            "pkg/core/registry.py": "def load():\n    import pkg.algorithms.ppo\n",
            "pkg/core/learner.py": "def f():\n    from pkg import training\n",
            "pkg/algorithms/__init__.py": "from pkg.core import registry\n",
            "pkg/algorithms/ppo.py": "from ..core import registry\n",
            "pkg/checkpoint/__init__.py": "def restore():\n    from ..algorithms import ppo\n",
            "pkg/training/__init__.py": "def run():\n    import pkg as jl\n",
        },
    )
    assert upward_imports(package) == [
        "pkg.checkpoint imports pkg.algorithms",
        "pkg.checkpoint imports pkg.algorithms.ppo",
        "pkg.core.learner imports pkg.training",
        "pkg.core.registry imports pkg.algorithms",
        "pkg.core.registry imports pkg.algorithms.ppo",
        "pkg.training imports the root package",
    ]


def test_a_cycle_through_a_function_local_import_is_caught(tmp_path):
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/core/__init__.py": "",
            "pkg/core/registry.py": "from pkg.core import learner\n",
            "pkg/core/learner.py": "def f():\n    from pkg.core.registry import register\n",
        },
    )
    assert cycles(import_graph(package)) == [["pkg.core.learner", "pkg.core.registry"]]


def test_every_extra_the_package_and_its_pages_name_is_declared():
    # An error that says pip install "jaxlearner[box2d]" needs pyproject to have that extra.
    root = PACKAGE.parent
    declared = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    files = [*PACKAGE.rglob("*.py"), root / "README.md", *(root / "docs").rglob("*.md")]
    named = {
        (extra, path.relative_to(root).as_posix())
        for path in files
        if "_build" not in path.parts
        for names in re.findall(r"jaxlearner\[([\w,-]+)\]", path.read_text())
        for extra in names.split(",")
    }
    undeclared = {pair for pair in named if pair[0] not in declared["optional-dependencies"]}
    assert not undeclared
    assert ("box2d", "jaxlearner/cli/run_settings.py") in named
