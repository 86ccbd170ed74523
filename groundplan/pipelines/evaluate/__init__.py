"""Evaluation sweeps: the sweep driver (``sweep.py``: configs → episodes → traces, resumable), where the
episodes run (``executors.py``: this process or Ray runner actors with batched scorers) and the HTML report
(``report.py``). What the traces mean is computed below, in :mod:`groundplan.evaluation`."""
