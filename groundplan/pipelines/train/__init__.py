"""Training (``groundplan train``): SayCanPay's Can and Pay on Ray Train, registered in the MLflow model
registry (``canpay.py``), and the point-goal navigation policy on RLlib (``pointnav.py``, config in
``pointnav_config.py``: BC + DAgger from the A* expert)."""
