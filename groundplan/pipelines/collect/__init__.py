"""Data collection (``groundplan collect``): the typed config (``config.py``) and the run (``collect.py``:
an expert or a planner played by the one episode loop, rows into the sharded Parquet store, in this
process or on Ray collection workers)."""
