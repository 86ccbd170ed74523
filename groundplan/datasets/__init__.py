"""Trajectory datasets for SayCanPay (Sec. 4: expert trajectories τ = (o0, g, a1..aT, r) per env).

``schema`` and ``store`` depend only on pyarrow and sit at the core layer (grounding may read
datasets); the episode that makes a row is played by :mod:`groundplan.rollout.trajectory`.
"""
from groundplan.datasets.schema import TRAJECTORY_SCHEMA
from groundplan.datasets.store import load_trajectories, prompt_examples

__all__ = ["TRAJECTORY_SCHEMA", "load_trajectories", "prompt_examples"]
