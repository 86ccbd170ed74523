"""Jobs that compose actors, one folder each: ``evaluate/`` (sweeps), ``collect/`` (expert trajectories),
``train/`` (Can/Pay and Say on Ray Train, the point-goal policy on RLlib), ``improve/`` (rounds of
rollouts, kept successes and Say training); ``tracking.py`` is the MLflow logging
they share. Their Ray session, scorers and workers come from :class:`~groundplan.actors.group.RunnerGroup`."""
