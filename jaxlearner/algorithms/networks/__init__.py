"""Networks: models and action distributions built from gymnasium spaces.

:mod:`~jaxlearner.algorithms.networks.spaces` turns spaces into JSON and into the
shapes a model needs; :mod:`~.encoders` (MLP and CNN torsos), :mod:`~.heads` (the output
heads and ``distribution_for``), :mod:`~.models` (actor-critics, Q-networks, SAC's actor and
critics) and :mod:`~.recurrent` (LSTM/GRU actor-critics) are the flax modules;
:mod:`~.distributions` and :mod:`~.distribution_spec` the action distributions.
"""
