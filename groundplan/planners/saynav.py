"""SayNav (Rajvanshi et al. 2023): LLM search plans grounded in an incremental 3D scene graph.

The loop of Algorithm 1 (Sec. 3.2): look around → update the graph → identify the room type (LLM,
Fig. 5) → decide whether to search this room (feasibility, Fig. 5, or the room-tracking prompt of
Fig. 8 with ``memory="llm"``) → ask the LLM for a short plan over the room's subgraph (Fig. 4) →
execute each ``navigate`` step with the env's point-goal navigator and each ``look`` step as a
look-around → when the plan ends with targets unfound, walk through the next unexplored door. Rooms
marked "come back later" are searched once no door is left; a room entered more than
``room_visit_limit`` times, or no door left, ends the episode (Sec. 3.4 and the authors' limits).

Plans are parsed with one regular expression per line (``- navigate; (x, y); comment`` and
``- look; (objects); comment``), never evaluated. A malformed ``-`` line, or a plan with no usable
step, is recorded in the decision's ``info`` and triggers a re-plan (``max_replans``). With
``plan_mode="score"`` the LLM instead ranks one candidate step per (furniture, target) pair by
log-probability, SayCan-style, so every step is grounded by construction; ``generate`` mode falls
back to it after its re-plans are spent, and says so in ``info``.

The planner sees only observations: its scene graph is built from detections, never from the map.
"""
from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ConfigDict, Field

from groundplan.core.types import CandidateScore
from groundplan.core.validation import validate_options
from groundplan.llm.base import GenerationParams, LanguageModel
from groundplan.perception.scene_graph import ObjectNode, RoomNode
from groundplan.planners.base import PlannerOptions
from groundplan.planners.nav_common import GeneratorPlanner, Program, navigate_skill
from groundplan.planners.saynav_prompts import (
    FEASIBILITY,
    ROOM_IDENTIFICATION,
    ROOM_TRACKING,
    SEARCH_PLAN,
    TRACKING_OPTIONS,
)

logger = logging.getLogger(__name__)

PLAN_LINE = re.compile(r"^-\s*(navigate|look)\s*;\s*\(([^()]*)\)\s*;?\s*(.*?)\s*$", re.I)
POINT = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*$")


class SayNavConfig(PlannerOptions):
    """Options of the SayNav planner (``PLANNERS.get("saynav")(lm=..., **options)``)."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int = Field(120, ge=1, description="decision cap per episode (each navigate/look is one decision)")
    plan_mode: Literal["generate", "score"] = Field(
        "generate", description="'generate': the LLM writes the plan lines (Fig. 4); 'score': it ranks one "
        "candidate navigate step per (furniture, target) pair by log-probability")
    temperature: float = Field(0.25, ge=0, description="sampling temperature of plan generation (the authors: 0.25)")
    max_new_tokens: int = Field(120, ge=8, le=1024, description="token budget of one generated plan")
    max_replans: int = Field(2, ge=0, le=10, description="re-plans after a malformed or empty plan")
    max_plan_steps: int = Field(4, ge=1, le=20, description="navigate steps kept from one plan")
    replan_rounds: int = Field(1, ge=0, le=5, description="extra plans in a room when targets are still unfound "
                               "and unvisited furniture remains (Sec. 3.4 (i): plan again with new information)")
    room_visit_limit: int = Field(6, ge=1, description="a room entered more than this many times ends the episode")
    memory: Literal["graph", "llm"] = Field("graph", description="room bookkeeping: 'graph' marks rooms in the scene "
                                            "graph (Sec. 3.3); 'llm' asks the room-tracking prompt (Sec. 4.7, Fig. 8)")
    feasibility: bool = Field(True, description="ask whether the targets are likely in the room type before planning")
    feasibility_margin: float = Field(0.0, description="log p(Yes) - log p(No) above which a target counts as likely")
    feasibility_calibration: bool = Field(True, description="subtract the mean Yes-No margin of the target over all "
                                          "room types first (a small LM says No to everything; calibrated, the "
                                          "question becomes: more likely here than in the average room?)")
    room_types: tuple[str, ...] = Field(("Kitchen", "LivingRoom", "Bedroom", "Bathroom", "Office", "DiningRoom"),
                                        description="room types offered to the room identification prompt")
    snap_radius: float = Field(1.0, ge=0, description="a planned point within this distance of seen furniture "
                               "snaps to it; farther points outside the room are refused as ungrounded")
    found_radius: float = Field(2.5, gt=0, description="a target counts as found when detected within this distance")
    graph_mode: Literal["auto", "gt", "noisy"] = Field("auto", description="scene-graph fusion: by instance id (gt), "
                                                       "by category and distance (noisy), or from the detections (auto)")
    seed: int = Field(0, description="base seed of plan sampling")

    @property
    def llm_needs(self) -> tuple[str, ...]:
        """Room identification and feasibility are answered by scoring (Fig. 5), always; the plan is
        written (generate mode, Fig. 4) or ranked by scoring (score mode)."""
        return ("score", "generate") if self.plan_mode == "generate" else ("score",)


@dataclass
class PlanStep:
    action: str  # navigate | look
    point: tuple[float, float] | None
    objects: tuple[str, ...]
    comment: str
    line: str


def parse_plan(text: str) -> tuple[list[PlanStep], list[str]]:
    """Plan lines → steps, plus the malformed ``-`` lines. Other lines (prose) are ignored."""
    steps: list[PlanStep] = []
    bad: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line.startswith("-"):
            continue
        m = PLAN_LINE.match(line)
        if not m:
            bad.append(line)
            continue
        action, arg, comment = m.group(1).lower(), m.group(2), m.group(3)
        if action == "navigate":
            p = POINT.match(arg)
            if not p:
                bad.append(line)
                continue
            steps.append(PlanStep("navigate", (float(p.group(1)), float(p.group(2))), (), comment, line))
        else:
            objs = tuple(o.strip() for o in arg.split(",") if o.strip())
            steps.append(PlanStep("look", None, objs, comment, line))
    return steps, bad


class SayNavPlanner(GeneratorPlanner):
    """See the module docstring."""

    name = "saynav"

    def __init__(self, lm: LanguageModel, config: SayNavConfig) -> None:
        super().__init__(max_steps=config.max_steps, found_radius=config.found_radius, graph_mode=config.graph_mode,
                         room_visit_limit=config.room_visit_limit)
        self.lm = lm
        self.config = config
        self._tracking_history: list[str] = []
        self._calls = 0
        self._margins: dict[tuple[str, str], float] = {}  # (target, room type) -> log p(Yes) - log p(No)

    def reset(self, task, observation, seed: int = 0) -> None:  # type: ignore[override]
        super().reset(task, observation, seed)
        self._tracking_history = []
        self._calls = 0

    # ------------------------------------------------------------------ the loop (Alg. 1)
    def program(self) -> Program:
        while True:
            stop, room = yield from self.arrive()
            if stop:
                return
            if room is not None:
                if room.type is None:
                    room.type, cands = self.identify_room(room)
                    self.log.append(f"room {room.room_id} identified as {room.type}")
                choice, info = self.track(room)
                self.log.append(f"{room.label}: {choice}")
                if choice == "search":
                    yield from self.search_room(room, info)
                    room.status = "searched"
                elif choice == "later" and room.status == "new":
                    room.status = "later"
            if not self.unfound:
                continue
            door = self.next_door()
            if door is not None:
                yield from self.go_through(door)
                continue
            later = [r for r in self.graph.rooms.values() if r.status == "later"]
            if not later:
                yield self.done("no unexplored door left")
                return
            x, z = self.pose
            target = min(later, key=lambda r: math.hypot(r.center()[0] - x, r.center()[1] - z))
            target.status = "revisit"
            yield self.act(navigate_skill(*target.center()), why=f"come back to {target.label}")

    # ------------------------------------------------------------------ room-level LLM calls
    def identify_room(self, room: RoomNode) -> tuple[str, list[CandidateScore]]:
        """Room identification prompt (Fig. 5), answered by scoring each room type."""
        seen = self.graph.seen_categories(room.room_id)
        if not seen:
            return "Room", []
        prompt = ROOM_IDENTIFICATION.format(room_types="\n".join(f"- {t}" for t in self.config.room_types),
                                            object_list=", ".join(seen))
        scores = self.lm.score(prompt, [" " + t for t in self.config.room_types])
        best = max(scores, key=lambda s: s.logprob_mean)
        return best.option.strip(), [CandidateScore(s.option.strip(), s.logprob_mean, None, s.logprob_mean) for s in scores]

    def feasible(self, room_type: str) -> tuple[bool, dict[str, float]]:
        """Search feasibility prompt (Fig. 5): is any unfound target likely in this room type?"""
        margins = {}
        for target in self.unfound:
            margins[target] = self._margin(target, room_type)
            if self.config.feasibility_calibration:
                ref = [self._margin(target, t) for t in self.config.room_types]
                margins[target] -= sum(ref) / len(ref)
        return any(m > self.config.feasibility_margin for m in margins.values()), margins

    def _margin(self, target: str, room_type: str) -> float:
        key = (target, room_type)
        if key not in self._margins:
            yes, no = self.lm.score(FEASIBILITY.format(object=target, room_type=room_type), [" Yes", " No"])
            self._margins[key] = yes.logprob_sum - no.logprob_sum
        return self._margins[key]

    def track(self, room: RoomNode) -> tuple[str, dict[str, Any]]:
        """search | later | skip, from the scene-graph memory or the room-tracking prompt (Fig. 8)."""
        if self.config.memory == "llm":
            hist = "".join(self._tracking_history)
            prompt = ROOM_TRACKING.format(history=hist, objects=", ".join(self.unfound), room=room.label)
            scores = self.lm.score(prompt, list(TRACKING_OPTIONS))
            best = max(range(3), key=lambda k: scores[k].logprob_mean)
            self._tracking_history.append(f"Objects: {', '.join(self.unfound)}\nRoom: {room.label}\n{TRACKING_OPTIONS[best]}\n")
            return ("search", "later", "skip")[best], {"tracking": [s.logprob_mean for s in scores]}
        if room.status == "searched":
            return "skip", {}
        if room.status in ("later", "revisit") or not self.config.feasibility:
            return "search", {}
        ok, margins = self.feasible(room.type or "Room")
        return ("search" if ok else "later"), {"feasibility": margins}

    # ------------------------------------------------------------------ searching a room
    def search_room(self, room: RoomNode, info: dict[str, Any]) -> Program:
        visited: set[int] = set()
        for round_ in range(1 + self.config.replan_rounds):
            todo = [o for o in self.graph.large_in(room.room_id) if o.node_id not in visited]
            if not todo or not self.unfound:
                return
            steps, plan_info = self.make_plan(room, todo)
            plan_info.update(info)
            plan_info["round"] = round_
            first = True
            for step in steps:
                if not self.unfound:
                    return
                if step.action == "navigate":
                    node = self._snap(step.point, todo)
                    if node is not None:
                        visited.add(node.node_id)
                    d = self.act(navigate_skill(*step.point), why=step.comment or "plan step", plan_line=step.line)
                else:
                    d = self.act("look around", why=step.comment or "look", plan_line=step.line)
                if first:
                    d.info["plan"] = plan_info
                    d.candidates = plan_info.pop("_candidates", [])
                    d.prompt_delta = plan_info.get("raw", "")
                    first = False
                yield d

    def _snap(self, point: tuple[float, float] | None, objs: list[ObjectNode]) -> ObjectNode | None:
        if point is None:
            return None
        best = min(objs, key=lambda o: math.hypot(o.x - point[0], o.z - point[1]), default=None)
        if best is not None and math.hypot(best.x - point[0], best.z - point[1]) <= self.config.snap_radius:
            return best
        return None

    def _prompt(self, room: RoomNode, todo: list[ObjectNode]) -> str:
        lines = [f"{name} ({o.x:.2f}, {o.z:.2f})" for name, o in self.graph.names(todo)]
        goal = "Find " + " and ".join(self.unfound)
        return SEARCH_PLAN.format(room_graph="\n".join(lines), goal=goal, base_location=room.type or "Room")

    def make_plan(self, room: RoomNode, todo: list[ObjectNode]) -> tuple[list[PlanStep], dict[str, Any]]:
        """A grounded plan for the room: generated with re-plans, or scored (see module docstring)."""
        prompt = self._prompt(room, todo)
        self.log.append(prompt)
        info: dict[str, Any] = {"mode": self.config.plan_mode, "attempts": []}
        if self.config.plan_mode == "generate":
            for attempt in range(1 + self.config.max_replans):
                self._calls += 1
                params = GenerationParams(temperature=self.config.temperature, max_new_tokens=self.config.max_new_tokens,
                                          stop=("\n\n", "Room description", "Goal:"), seed=self.seed * 1000 + self._calls)
                text = self.lm.generate(prompt + "-", params)[0].text
                text = text if text.lstrip().startswith("-") else "-" + text  # the prompt ends with "-"
                steps, bad = parse_plan(text)
                grounded, ungrounded = self._ground(steps, room, todo)
                record = {"raw": text, "malformed": bad, "ungrounded": ungrounded,
                          "steps": [s.line for s in grounded]}
                info["attempts"].append(record)
                self.log.append(text)
                if not bad and any(s.action == "navigate" for s in grounded):
                    info["raw"] = text
                    return self._with_looks(grounded), info
                logger.debug("saynav: re-plan (malformed=%d, ungrounded=%d)", len(bad), len(ungrounded))
            info["fallback"] = "score"
        steps, cands = self._score_plan(room, todo)
        info["_candidates"] = cands
        info["raw"] = "\n".join(s.line for s in steps)
        return steps, info

    def _ground(self, steps: list[PlanStep], room: RoomNode, todo: list[ObjectNode]
                ) -> tuple[list[PlanStep], list[str]]:
        """Keep steps whose point is at seen furniture (snapped onto it) or inside the room."""
        out, bad = [], []
        for s in steps:
            if s.action == "look":
                out.append(s)
                continue
            node = self._snap(s.point, todo)
            if node is not None:
                out.append(PlanStep("navigate", (node.x, node.z), s.objects, s.comment, s.line))
            elif s.point is not None and room.contains(*s.point):
                out.append(s)
            else:
                bad.append(s.line)
        navs = [s for s in out if s.action == "navigate"][: self.config.max_plan_steps]
        keep = set(id(s) for s in navs)
        return [s for s in out if s.action == "look" or id(s) in keep], bad

    def _with_looks(self, steps: list[PlanStep]) -> list[PlanStep]:
        """Make sure every navigate step is followed by a look (the paper's plans alternate them)."""
        out: list[PlanStep] = []
        for k, s in enumerate(steps):
            if s.action == "look" and (not out or out[-1].action == "look"):
                continue  # a look with nothing new to look at
            out.append(s)
            if s.action == "navigate" and (k + 1 >= len(steps) or steps[k + 1].action != "look"):
                out.append(PlanStep("look", None, tuple(self.unfound), "look around", "- look; (); added"))
        return out

    def _score_plan(self, room: RoomNode, todo: list[ObjectNode]) -> tuple[list[PlanStep], list[CandidateScore]]:
        """Rank furniture by the LLM's log-probability of the step that searches it for a target."""
        prompt = self._prompt(room, todo)
        named = self.graph.names(todo)
        options, keys = [], []
        for name, o in named:
            for t in self.unfound:
                options.append(f"- navigate; ({o.x:.2f}, {o.z:.2f}); Walk to the {name} to look for the {t}")
                keys.append(o.node_id)
        scores = self.lm.score(prompt, options) if options else []
        best: dict[int, float] = {}
        for k, s in zip(keys, scores):
            best[k] = max(best.get(k, -math.inf), s.logprob_mean)
        cands = [CandidateScore(opt, s.logprob_mean, None, s.logprob_mean) for opt, s in zip(options, scores)]
        ranked = sorted(named, key=lambda no: -best.get(no[1].node_id, -math.inf))[: self.config.max_plan_steps]
        steps: list[PlanStep] = []
        for name, o in ranked:
            line = f"- navigate; ({o.x:.2f}, {o.z:.2f}); Walk to the {name}"
            steps.append(PlanStep("navigate", (o.x, o.z), (), f"Walk to the {name}", line))
            steps.append(PlanStep("look", None, tuple(self.unfound), f"Look near the {name}",
                                  f"- look; ({', '.join(self.unfound)}); Look near the {name}"))
        return steps, cands


def make_saynav(lm: LanguageModel, affordance: Any = None, **options: Any) -> SayNavPlanner:
    """Registry factory; ``affordance`` is unused (the scene graph grounds the plans)."""
    return SayNavPlanner(lm, validate_options(SayNavConfig, options, "saynav options"))
