"""``python -m jaxlearner.cli``: the ``jaxlearner`` command without its script."""

from jaxlearner_cli import main

main()
