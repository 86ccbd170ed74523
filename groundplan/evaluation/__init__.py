"""The evaluation layer: what a run's traces mean, computed once for every caller.

Summaries with n and 95% intervals, paired tests with Holm-adjusted p-values (``summary.py``), and each
paper's tables as functions: SayCanPay's Tables 3-5 (``saycanpay.py``) and SayNav's MultiON Table 1
(``saynav.py``); ``tables.py`` picks a run's table from what the run declares. It sits below the
pipelines, Serve and the CLI, which all call it: the sweep driver and MLflow logging, the trace viewer,
``groundplan eval``'s printed table and ``groundplan tables RUN...``.
"""
