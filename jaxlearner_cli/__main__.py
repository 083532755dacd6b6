"""``python -m jaxlearner_cli``: the ``jaxlearner`` command, signals handled from its first line."""

from jaxlearner_cli import main

main()
