"""``python -m jaxlearner``: the ``jaxlearner`` command without its script."""

from jaxlearner_cli import main

main()
