"""``python -m jaxlearner.cli``: the ``jaxlearner`` command without its script."""

import sys

from jaxlearner.cli.main import main

sys.exit(main())
