"""The import graph: each outside library enters through its own modules; the core needs none."""

import ast
import pathlib
import subprocess
import sys

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "jaxlearner"

# Which of the package's modules may import each outside library (paths relative to it).
ALLOWED = {
    "orbax": {"checkpoint.py"},
    "gymnasium": {
        "env_runner.py",
        "spaces.py",
        "encoders.py",
        "models.py",
        "cli.py",
        "envs/*",
        "algorithms/*",
    },
    "matplotlib": {"cli.py", "plotting.py"},
    "tensorboardX": {"loggers.py"},
    "mlflow": {"loggers.py"},
    "tqdm": {"loggers.py"},
    "gymnax": {"envs/gymnax.py"},
    "PIL": {"video.py"},
    "imageio": {"video.py"},
    "imageio_ffmpeg": {"video.py"},
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
