"""docs/guides/rllib.md, the map from RLlib to jaxlearner, names only what exists.

Every ``jl.`` name in the map resolves, every ``learner.`` method or attribute is one of
``jl.Learner``'s, and every keyword written in a call (``jl.Learner(..., drop_last=True)``,
``PPOConfig(use_lstm=True)``) is a parameter or field of what it calls.
"""

import inspect
import pathlib
import re

import pytest

import jaxlearner as jl
from jaxlearner.algorithms import APPOConfig, DQNConfig, PPOConfig, SACConfig

MAP = pathlib.Path(__file__).resolve().parents[1] / "docs" / "guides" / "rllib.md"
CALLABLES = {
    "PPOConfig": PPOConfig,
    "APPOConfig": APPOConfig,
    "DQNConfig": DQNConfig,
    "SACConfig": SACConfig,
    "ModuleSpec": jl.ModuleSpec,
}
# Keywords the map writes on calls that take them through **kwargs (the learner's config fields).
FORWARDED = {jl.Learner: jl.LearnerConfig}


def _rows():
    return [line for line in MAP.read_text().splitlines() if line.startswith("| `")]


def _resolve(dotted):
    value = jl
    for part in dotted.split(".")[1:]:
        value = getattr(value, part)
    return value


def _parameters(target):
    names = set(inspect.signature(target).parameters)
    if target in FORWARDED:
        names |= set(FORWARDED[target].field_names())
    return names


def test_the_map_has_a_row_per_feature():
    assert len(_rows()) >= 25


def test_every_jl_name_in_the_map_exists():
    names = sorted(set(re.findall(r"\bjl\.[A-Za-z_][\w.]*[A-Za-z_\d]", MAP.read_text())))
    assert names
    missing = []
    for name in names:
        try:
            _resolve(name)
        except AttributeError:
            missing.append(name)
    assert not missing, f"the map names {missing}, which jaxlearner does not have"


def test_every_learner_method_in_the_map_exists():
    names = set(re.findall(r"\blearner\.([A-Za-z_]\w*)", MAP.read_text()))
    assert {"update", "additional_update", "add_module"} <= names
    assert not sorted(n for n in names if not hasattr(jl.Learner, n))


@pytest.mark.parametrize("row", _rows(), ids=lambda row: row[3:40])
def test_every_keyword_in_a_call_is_a_parameter_of_what_it_calls(row):
    jaxlearner_side = row.split(" | ")[-1]
    for callee, arguments in re.findall(r"([\w.]+)\(([^()]*)\)", jaxlearner_side):
        target = _resolve(callee) if callee.startswith("jl.") else CALLABLES.get(callee)
        if target is None or not callable(target):
            continue
        keywords = set(re.findall(r"\b([a-z_]\w*)=", arguments))
        unknown = sorted(keywords - _parameters(target))
        assert not unknown, f"{callee}(...) takes no {unknown} (in the row {row[:60]!r})"
