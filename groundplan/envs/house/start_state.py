"""The house envs' start state: none to give. A MultiON episode starts where its seed puts the agent in
the task's house (``HouseEnv.reset`` reads the task's goal and metadata, never ``start_state``), so the
only start state is the empty one; any key is refused rather than silently ignored."""
from __future__ import annotations

from groundplan.envs.start_state import StartState


class HouseStartState(StartState):
    """``{}``: nothing of a house episode's start is pinned by a start state."""
