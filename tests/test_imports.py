"""The import graph: each outside library enters through its own modules; the core needs none."""

import ast
import pathlib
import subprocess
import sys

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "jaxlearner"

# Which of the package's modules may import each outside library (paths relative to it).
ALLOWED = {
    "orbax": {"checkpoint/manager.py"},
    "gymnasium": {
        "training/env_runner.py",
        "training/vector_env.py",
        "cli/run_settings.py",
        "cli/evaluate.py",
        "training/multi_agent_env.py",
        "algorithms/*",
        "anakin/envs/*",
    },
    "matplotlib": {"cli/plot.py", "training/plotting.py"},
    "tensorboardX": {"training/loggers.py"},
    "mlflow": {"training/loggers.py"},
    "tqdm": {"training/loggers.py"},
    "gymnax": {"anakin/envs/gymnax.py"},
    "pettingzoo": {"training/multi_agent_env.py"},
    "PIL": {"training/video.py"},
    "imageio": {"training/video.py"},
    "imageio_ffmpeg": {"training/video.py"},
    "minari": {"training/minari_datasets.py"},
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


def module_name(path):
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_level_imports(path, modules):
    """The package's modules that ``path`` imports at module level, TYPE_CHECKING blocks included.

    Imports inside functions are left out: they run when called, after every module has
    loaded. ``from a import b`` names the module ``a.b`` when there is one, else ``a``.
    Importing ``a.b.c`` also runs the enclosing subpackage ``a.b``, counted unless it
    encloses ``path`` itself; the root package is counted only where it is named, since
    it runs first for every submodule whatever imports what.
    """
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()

    def visit(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if isinstance(child, ast.Import):
                targets.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parent = package.rsplit(".", child.level - 1)[0]
                    base = f"{parent}.{base}" if base else parent
                for alias in child.names:
                    submodule = f"{base}.{alias.name}"
                    targets.add(submodule if submodule in modules else base)
            visit(child)

    visit(ast.parse(path.read_text()))
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
    """No cycle among jaxlearner's modules through top-level or TYPE_CHECKING imports.

    Function-local (lazy) imports are excluded: ``learner_from_recipe`` in registry.py
    imports ``jaxlearner.algorithms`` when it meets an unregistered name, so the built-in
    algorithms register themselves without the registry depending on them at import time.
    Imports of the root package ``jaxlearner`` from inside it count; the root's own lazy
    exports go through ``importlib`` and are not imports here.
    """
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(path) for path in paths}
    graph = {module_name(path): module_level_imports(path, modules) for path in paths}
    assert graph["jaxlearner.algorithms"] >= {"jaxlearner.core.registry", "jaxlearner.core.learner"}
    assert cycles(graph) == []


# Each sub-package may import from the layers before it in this list (and from its own).
LAYERS = [
    {"types", "errors", "files", "folder_lock"},
    {"core"},
    {"algorithms", "checkpoint"},
    {"training", "anakin"},
    {"cli"},
]


def layer_of(module):
    """The index in LAYERS of a module's sub-package; None for the root package."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "__main__":
        return None  # jaxlearner/__init__.py re-exports every layer; __main__ runs the CLI
    return next(i for i, names in enumerate(LAYERS) if parts[1] in names)


def test_layers_import_downward_only():
    """core/ needs no algorithm, checkpoint or driver; algorithms/ and checkpoint/ need no driver
    and not each other; training/ and anakin/ sit above them, and cli/ (the command line, an
    application of the library) on top. Top-level and TYPE_CHECKING imports
    count; lazy imports inside functions (the registry's import of the built-in algorithms)
    do not."""
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(path) for path in paths}
    upward = []
    for path in paths:
        source = module_name(path)
        if layer_of(source) is None:
            continue
        for target in module_level_imports(path, modules):
            if layer_of(target) is None:
                upward.append(f"{source} imports the root package")
                continue
            same_layer = layer_of(target) == layer_of(source)
            sibling = same_layer and target.split(".")[1] != source.split(".")[1]
            if layer_of(target) > layer_of(source) or (sibling and layer_of(source) == 2):
                upward.append(f"{source} imports {target}")
    assert upward == []


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
