"""Training around gymnasium: the env runner, the Trainer, stop conditions, loggers, the CLI.

Imported on first use (``jl.Trainer``, ``jl.loggers``, ``jaxlearner`` on the command line).
"""
