"""Sphinx configuration: MyST pages, notebooks with their saved outputs, an API reference from
the docstrings. Build with ``sphinx-build -W --keep-going -n docs docs/_build/html``."""

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

import jaxlearner  # noqa: E402

project = "jaxlearner"
author = "the jaxlearner authors"
copyright = "the jaxlearner authors"
release = jaxlearner.__version__
version = release

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinxcontrib.mermaid",
    "jaxlearner_api",
]
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]

# MyST: ``(#anchor)`` links to headings, ```mermaid fences as diagrams.
myst_heading_anchors = 3
myst_fence_as_directive = ["mermaid"]
myst_enable_extensions = ["colon_fence"]

# The notebooks are rendered with the outputs saved in them (docs/execute_notebooks.py);
# executing them here would take minutes of CI. tests/test_notebooks.py runs them.
nb_execution_mode = "off"

autodoc_default_options = {"members": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_class_signature = "separated"
autoclass_content = "class"
add_module_names = False
autosummary_generate = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True

# No network here: other projects' inventories cannot be fetched, so names from them are
# left as text. Every jaxlearner reference must resolve (sphinx-build -n).
nitpick_ignore_regex = [
    (
        "py:.*",
        r"(jax|jaxlib|jnp|flax|optax|orbax|chex|numpy|np|gymnasium|gym|matplotlib"
        r"|pettingzoo|minari|wandb|tensorboardX|mlflow|tqdm|collections|typing|types|os"
        r"|pathlib|enum|dataclasses|io|concurrent)(\..*)?",
    ),
]

html_theme = "sphinx_book_theme"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_title = f"jaxlearner {release}"
# No repository button: the project has no public repository address yet (the docs name none).
html_theme_options = {"show_toc_level": 2}
