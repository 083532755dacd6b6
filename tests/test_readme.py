"""The README's quickstart runs as written."""

import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def _block(marker):
    text = README.read_text()
    match = re.search(rf"<!-- {marker}.*?-->\s*```python\n(.*?)```", text, re.S)
    assert match, f"README has no python block after the '{marker}' marker"
    return match.group(1)


def test_quickstart_runs():
    namespace = {}
    exec(compile(_block("quickstart"), "README quickstart", "exec"), namespace)
    metrics = namespace["metrics"]
    assert set(metrics) == {"policy", "__all__"}
    assert int(namespace["state"].updates) == 10
