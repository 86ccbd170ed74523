"""Baselines for MultiON in houses (SayNav Sec. 4.4).

* ``house_explore``: exploration without an LLM. In each new room it looks around and visits the seen
  furniture in nearest-neighbour order (looking around at each), then takes the nearest unexplored
  door (door/frontier order); no priors, so it searches every room it reaches.
* ``house_oracle``: the paper's baseline, given privileged information: the targets' ground-truth
  positions and the order that gives the shortest path. It reads ``task.goal`` and is labelled oracle.
"""
from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from groundplan.core.truth import OracleDeclaration, Truth, read
from groundplan.core.types import Observation, Task
from groundplan.core.validation import validate_options
from groundplan.planners.base import PlannerOptions, labelled
from groundplan.planners.nav_common import GeneratorPlanner, Program, navigate_skill


class ExploreConfig(PlannerOptions):
    """Options of the no-LLM exploration baseline."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int = Field(120, ge=1, description="decision cap per episode")
    visit: Literal["landmarks", "none"] = Field("landmarks", description="'landmarks': visit each seen piece of "
                                                "furniture in a room; 'none': only look around at each room entry")
    room_visit_limit: int = Field(6, ge=1, description="a room entered more than this many times ends the episode")
    found_radius: float = Field(2.5, gt=0, description="a target counts as found when detected within this distance")
    graph_mode: Literal["auto", "gt", "noisy"] = Field("auto", description="scene-graph fusion mode")


class ExplorePlanner(GeneratorPlanner):
    name = "house_explore"

    def __init__(self, config: ExploreConfig) -> None:
        super().__init__(max_steps=config.max_steps, found_radius=config.found_radius, graph_mode=config.graph_mode,
                         room_visit_limit=config.room_visit_limit)
        self.config = config

    def program(self) -> Program:
        visited: set[int] = set()
        while True:
            stop, room = yield from self.arrive()
            if stop:
                return
            if room is not None:
                while self.config.visit == "landmarks" and room.status != "searched" and self.unfound:
                    todo = [o for o in self.graph.large_in(room.room_id) if o.node_id not in visited]
                    if not todo:
                        break
                    x, z = self.pose
                    o = min(todo, key=lambda o: math.hypot(o.x - x, o.z - z))
                    visited.add(o.node_id)
                    yield self.act(navigate_skill(o.x, o.z), why=f"visit {o.category}")
                    yield self.act("look around", why=f"look near {o.category}")
                room.status = "searched"
            if not self.unfound:
                continue
            door = self.next_door()
            if door is None:
                yield self.done("no unexplored door left")
                return
            yield from self.go_through(door)


class OracleConfig(PlannerOptions):
    """Options of the privileged baseline (target positions and optimal order: an oracle)."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int = Field(40, ge=1, description="decision cap per episode")
    found_radius: float = Field(2.5, gt=0, description="a target counts as found when detected within this distance")

    #: the paper's privileged baseline: the targets' true positions (the house's objects by the task's
    #: target ids, the house rebuilt from the task's metadata) and the order of the shortest tour
    TARGET_POSITIONS: ClassVar[OracleDeclaration] = OracleDeclaration(
        name="target positions", reads=frozenset({Truth.GOAL, Truth.METADATA}),
        wording="the targets' ground-truth positions and the shortest-tour order (SayNav Sec. 4.4's privileged "
                "baseline)")

    @property
    def declarations(self) -> tuple[OracleDeclaration, ...]:
        return (self.TARGET_POSITIONS,)


class OraclePlanner(GeneratorPlanner):
    """Walks to each target's ground-truth position in the shortest-path order (SayNav Sec. 4.4)."""

    name = "house_oracle"

    def __init__(self, config: OracleConfig) -> None:
        super().__init__(max_steps=config.max_steps, found_radius=config.found_radius)
        self.config = config
        self._order: list[tuple[str, tuple[float, float]]] = []
        self.name = labelled(self.name, self.oracles)

    @property
    def declarations(self) -> tuple[OracleDeclaration, ...]:
        return self.config.declarations

    def reset(self, task: Task, observation: Observation, seed: int = 0) -> None:
        super().reset(task, observation, seed)
        # privileged: ground-truth positions and the optimal order (this planner is the oracle baseline)
        from groundplan.envs.house.env import cached_house
        from groundplan.envs.house.metrics import shortest_tour

        meta = read(task, Truth.METADATA, self)
        house = cached_house(int(meta["house_seed"]), int(meta["min_rooms"]), int(meta["max_rooms"]))
        objs = {o.obj_id: o for o in house.objects}
        targets = [objs[t] for t in read(task, Truth.GOAL, self)["target_ids"]]
        tour = shortest_tour(house, self.pose, targets, self.config.found_radius)
        pos = {t.category: t.position for t in targets}
        self._order = [(c, pos[c]) for c in tour.order]

    def program(self) -> Program:
        for category, (x, z) in self._order:
            if category in self.found:
                continue
            yield self.act(navigate_skill(x, z), why=f"go to {category} (ground truth)")
            if category not in self.found:
                yield self.act("look around", why=f"look for {category}")
        yield self.done("visited every target" if not self.unfound else "targets not all seen")


def make_explore(lm: Any = None, affordance: Any = None, **options: Any) -> ExplorePlanner:
    return ExplorePlanner(validate_options(ExploreConfig, options, "house_explore options"))


def make_oracle(lm: Any = None, affordance: Any = None, **options: Any) -> OraclePlanner:
    return OraclePlanner(validate_options(OracleConfig, options, "house_oracle options"))
