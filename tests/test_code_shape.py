"""The size rules of STYLE.md 17 as tests: modules, functions and signatures stay small.

A module over 500 lines, a function over 80 lines of code (its docstring, blank lines and
comment lines not counted) or a signature of more than 10 parameters (``self`` and ``cls``
not counted) fails here, naming where. Split at a concept boundary; group parameters in a
config.
"""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "jaxlearner"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80
MAX_PARAMETERS = 10
MAX_ALGORITHM_MODULES = 12
# Public constructors of 11 parameters, older than this rule: grouping their options changes
# what every caller writes, so it is its own step. The test fails when the list is stale.
WIDE_SIGNATURES = {
    # One keyword option per config field (actor_critic_options(config) passes them all):
    # the encoder's, the heads', the initialisation and the CNN's padding; the recurrent
    # one adds the cell's kind and size.
    "algorithms/networks/models.py actor_critic",
    "algorithms/networks/recurrent.py recurrent_actor_critic",
    "training/multi_agent/trainer.py MultiAgentTrainer.__init__",
    "training/trainer.py Trainer.__init__",
}


def modules(root=PACKAGE):
    return sorted(root.rglob("*.py"))


def functions(tree):
    """Every function of a module, with ``qualname`` set (``Class.method``)."""
    for parent in ast.walk(tree):
        for node in ast.iter_child_nodes(parent):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                prefix = getattr(parent, "qualname", getattr(parent, "name", None))
                node.qualname = (
                    node.name if isinstance(parent, ast.Module) else (f"{prefix}.{node.name}")
                )
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def code_lines(node, source_lines):
    """Lines of ``node`` that hold code: no docstring, blank or comment-only lines."""
    docstring = set()
    first = node.body[0]
    value = first.value if isinstance(first, ast.Expr) else None
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        docstring = set(range(first.lineno, first.end_lineno + 1))
    count = 0
    for number in range(node.lineno, node.end_lineno + 1):
        line = source_lines[number - 1].strip()
        if line and not line.startswith("#") and number not in docstring:
            count += 1
    return count


def parameters(node):
    args = node.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return [n for n in names if n not in ("self", "cls")]


def oversized_modules(root=PACKAGE):
    """``{path: lines}`` of the modules over the bound."""
    return {
        p.relative_to(root).as_posix(): n
        for p in modules(root)
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }


def oversized_functions(root=PACKAGE):
    """``(too long, too many parameters)``: ``"path:line name (count)"`` for each function."""
    too_long, too_wide = [], []
    for path in modules(root):
        source = path.read_text()
        lines = source.splitlines()
        for node in functions(ast.parse(source)):
            where = f"{path.relative_to(root).as_posix()}:{node.lineno} {node.qualname}"
            if (count := code_lines(node, lines)) > MAX_FUNCTION_LINES:
                too_long.append(f"{where} ({count} lines)")
            if len(names := parameters(node)) > MAX_PARAMETERS:
                too_wide.append(f"{where} ({len(names)} parameters)")
    return too_long, too_wide


def test_no_module_is_over_500_lines():
    assert not (long := oversized_modules()), f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_is_over_80_lines_of_code_or_10_parameters():
    too_long, too_wide = oversized_functions()
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines of code: {too_long}"
    wide = {_without_line(where) for where in too_wide}
    assert wide == WIDE_SIGNATURES, f"functions over {MAX_PARAMETERS} parameters: {too_wide}"


def _without_line(where):
    """``"path:12 Class.name (11 parameters)"`` -> ``"path Class.name"``."""
    path, rest = where.split(":", 1)
    return f"{path} {rest.split(' ')[1]}"


def test_algorithms_keeps_at_most_12_modules_at_its_top_level():
    top = sorted(p.name for p in (PACKAGE / "algorithms").glob("*.py"))
    assert len(top) <= MAX_ALGORITHM_MODULES, top


def test_the_checks_find_what_they_are_for(tmp_path):
    # A docstring, a comment and a blank line are not code: 2 lines below.
    small = 'def f(a, b):\n    """Doc\n    string."""\n    # why\n\n    return a + b\n'
    (node,) = functions(ast.parse(small))
    assert code_lines(node, small.splitlines()) == 2
    (tmp_path / "ok.py").write_text(small)
    (tmp_path / "big.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "long.py").write_text(f'def long():\n    """Doc."""\n{body}')
    wide = "class C:\n    def g(self, a, b, c, d, e, f, g, h, i, j, *rest): pass\n"
    (tmp_path / "wide.py").write_text(wide)
    assert oversized_modules(tmp_path) == {"big.py": MAX_MODULE_LINES + 1}
    too_long, too_wide = oversized_functions(tmp_path)
    assert too_long == [f"long.py:1 long ({MAX_FUNCTION_LINES + 1} lines)"]
    assert too_wide == ["wide.py:2 C.g (11 parameters)"]
