"""``python -m jaxlearner``: the ``jaxlearner`` command without its script."""

import sys

from jaxlearner.cli import main

sys.exit(main())
