"""Jobs that compose actors, one folder each: ``evaluate/`` (sweeps), ``collect/`` (expert trajectories),
``train/`` (Can/Pay on Ray Train, the point-goal policy on RLlib); ``tracking.py`` is the MLflow logging
they share. The Ray plumbing they use sits beside the actors (:mod:`groundplan.actors.cluster`)."""
