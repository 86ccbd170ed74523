"""Online self-improvement of the planner's LM (``groundplan improve``): the config (``config.py``), the
rounds (``rounds.py``) and their table and plot (``report.py``)."""
