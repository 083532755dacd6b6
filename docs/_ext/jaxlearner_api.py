"""Holds the API reference to the public names, and links references by public name.

The public names are ``jaxlearner.__all__``, ``jaxlearner.algorithms.__all__`` and
``jaxlearner.anakin.__all__``; a sub-module among them (``jl.envs``, ``jl.loggers``, ...)
adds its own ``__all__``, or else the functions and classes it defines without a leading
underscore. The build warns (and so, with ``-W``, fails) when one of them is not in the
reference or has no docstring of its own.

Public objects are defined in private modules (``jl.Learner`` in ``jaxlearner.core.learner``),
so type annotations and docstrings name them by their defining path, or by a name relative to
their defining module. A reference that Sphinx cannot resolve is looked up again: by the public
name of the object it names, which gets the link; an object that exists but is not public is
shown as text; a name that names nothing stays an error.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.errors import PycodeError
from sphinx.pycode import ModuleAnalyzer
from sphinx.util import logging

logger = logging.getLogger(__name__)

PUBLIC_MODULES = ("jaxlearner", "jaxlearner.algorithms", "jaxlearner.anakin")
_DOCSTRING_SOURCE = re.compile(r"docstring of (?P<name>[\w.]+)")


def _module_members(module: Any) -> list[str]:
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isfunction(value) or inspect.isclass(value))
        and value.__module__ == module.__name__
    ]


def public_names() -> dict[str, Any]:
    """Every public name, as the reference documents it, with its object."""
    names: dict[str, Any] = {}
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            if not inspect.ismodule(value):
                names[f"{module_name}.{name}"] = value
            elif value.__name__ not in PUBLIC_MODULES:
                names[value.__name__] = value
                for member in _module_members(value):
                    names[f"{value.__name__}.{member}"] = getattr(value, member)
    return names


def _defining_paths(names: dict[str, Any]) -> dict[str, str]:
    """``{defining path: public name}`` for the public classes and functions."""
    paths: dict[str, str] = {}
    for public, value in names.items():
        if inspect.isclass(value) or inspect.isfunction(value):
            path = f"{value.__module__}.{value.__qualname__}"
            # An alias (jl.All for jl.AllOf) yields to the name the object was given.
            if path not in paths or public.rsplit(".", 1)[1] == value.__name__:
                paths[path] = public
    return paths


def _lookup(path: str) -> Any:
    """The object at a dotted path (a module, then attributes), or None."""
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attribute in parts[split:]:
                value = getattr(value, attribute)
        except AttributeError:
            return None
        return value
    return None


def _defining_module(path: str) -> str | None:
    """The module that defines the object at ``path``, or the nearest object holding it."""
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        value = _lookup(".".join(parts[:end]))
        if inspect.ismodule(value):
            return value.__name__
        module = getattr(value, "__module__", None)
        if isinstance(module, str) and module.startswith("jaxlearner"):
            return module
    return None


def _candidates(target: str, node: nodes.Element) -> list[str]:
    """Where ``target`` may live: as written, then in the module defining the documented object
    (a docstring's, or a signature's: ``Params`` in ``LearnerState``'s field types)."""
    found = [target]
    documented = []
    match = _DOCSTRING_SOURCE.search(node.source or "")
    if match:
        documented.append(match.group("name"))
    if node.get("py:module"):
        context = [node["py:module"], node.get("py:class")]
        documented.append(".".join(part for part in context if part))
    for path in documented:
        module = _defining_module(path)
        if module is not None:
            found.append(f"{module}.{target}")
    return found


def _public_target(path: str, paths: dict[str, str]) -> str | None:
    """The public name of the object (or the member of an object) at a defining path."""
    if path in paths:
        return paths[path]
    for defining, public in paths.items():
        if path.startswith(defining + "."):
            return public + path[len(defining) :]
    return None


def resolve_reference(
    app: Sphinx, env: BuildEnvironment, node: nodes.Element, contnode: nodes.Element
) -> nodes.Element | None:
    """Links a jaxlearner object by its public name; leaves a private one as text."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip("~.")
    paths = env.app.jaxlearner_defining_paths
    domain = env.get_domain("py")
    for candidate in _candidates(target, node):
        value = _lookup(candidate)
        if value is None:
            continue
        real = candidate
        if inspect.isclass(value) or inspect.isfunction(value):
            real = f"{value.__module__}.{value.__qualname__}"
        public = _public_target(real, paths) or _public_target(candidate, paths)
        if public is not None:
            resolved = domain.resolve_xref(
                env, node["refdoc"], app.builder, "obj", public, node, contnode
            )
            if resolved is not None:
                return resolved
        if candidate.split(".")[0] == "jaxlearner":
            return contnode
    return None


def _attribute_docstring(name: str, value: Any) -> list[str]:
    """The docstring under ``NAME = ...`` in the jaxlearner module that defines ``NAME``."""
    short = name.rsplit(".", 1)[1]
    for module_name, module in sorted(sys.modules.items()):
        if module_name.split(".")[0] != "jaxlearner" or getattr(module, short, None) is not value:
            continue
        try:
            docs = ModuleAnalyzer.for_module(module_name).find_attr_docs()
        except PycodeError:
            continue
        if ("", short) in docs:
            return list(docs["", short])
    return []


def fill_data_docstring(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """Gives data (``jl.ALL_MODULES``, type aliases) the docstring under its definition, or none.

    autodoc finds that docstring only when the data is documented where it is defined, and
    otherwise shows the docstring of the value's type (``str``'s for ``__version__``,
    ``Mapping``'s for a type alias).
    """
    if what == "data":
        lines[:] = _attribute_docstring(name, obj)


def _has_own_docstring(what: str, obj: Any, lines: list[str]) -> bool:
    if what == "data":
        return bool("".join(lines).strip())
    # The object's own docstring: a class inherits its bases' in ``inspect.getdoc``.
    doc = vars(obj).get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    doc = (doc or "").strip()
    # A dataclass without a docstring gets its signature as one: ``Name(a: int, ...)``.
    generated = inspect.isclass(obj) and doc.startswith(f"{obj.__name__}(")
    return bool(doc) and not generated


def record_docstring(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """Notes whether each documented object has a docstring of its own."""
    app.env.jaxlearner_docstrings[name] = (app.env.docname, _has_own_docstring(what, obj, lines))


def purge_docstrings(app: Sphinx, env: BuildEnvironment, docname: str) -> None:
    env.jaxlearner_docstrings = {
        name: entry
        for name, entry in getattr(env, "jaxlearner_docstrings", {}).items()
        if entry[0] != docname
    }


def check_public_names(app: Sphinx, env: BuildEnvironment) -> None:
    """Warns for each public name the reference leaves out or documents without a docstring."""
    documented = env.jaxlearner_docstrings
    for name in sorted(app.jaxlearner_public_names):
        if name not in documented:
            logger.warning("public name %s is not in the API reference (docs/api/)", name)
        elif not documented[name][1]:
            logger.warning("public name %s has no docstring", name)


def init_env(app: Sphinx) -> None:
    if not hasattr(app.env, "jaxlearner_docstrings"):
        app.env.jaxlearner_docstrings = {}


def setup(app: Sphinx) -> dict[str, Any]:
    app.jaxlearner_public_names = public_names()
    app.jaxlearner_defining_paths = _defining_paths(app.jaxlearner_public_names)
    app.connect("builder-inited", init_env)
    app.connect("env-purge-doc", purge_docstrings)
    app.connect("autodoc-process-docstring", fill_data_docstring, priority=400)
    app.connect("autodoc-process-docstring", record_docstring, priority=900)
    app.connect("missing-reference", resolve_reference)
    app.connect("env-check-consistency", check_public_names)
    return {"parallel_read_safe": False, "parallel_write_safe": True}
