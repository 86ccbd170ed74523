"""Jobs that compose actors, one folder each: ``evaluate/`` (sweeps), ``collect/`` (expert trajectories),
``train/`` (Can/Pay on Ray Train, the point-goal policy on RLlib); ``tracking.py`` is the MLflow logging
they share. Their Ray session, scorers and workers come from :class:`~groundplan.actors.group.RunnerGroup`."""
