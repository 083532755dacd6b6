"""``python -m jaxlearner``: the ``jaxlearner`` command without its script."""

import sys

from jaxlearner.training.cli import main

sys.exit(main())
