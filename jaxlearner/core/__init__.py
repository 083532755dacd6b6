"""The learner core: the frozen Learner, its state, config, placement, update and optimizers.

Imports neither orbax nor gymnasium: it runs with no environment and no disk.
``jaxlearner`` re-exports its public names (``jl.Learner``, ``jl.ModuleSpec``, ...).
"""
