"""VirtualHome's atomic actions in two forms and an exact two-way mapping between them.

Zero-Shot Planners (Huang et al., 2022) exposes only natural language to the language models and
converts every step to VirtualHome's script syntax by a fixed template per atomic action (Appendix
A.4), e.g. ``"walk to dining room"`` ↔ ``[WALK] <dining_room> (1)`` and ``"put cup on table"`` ↔
``[PUTBACK] <cup> (1) <table> (1)``. As in the paper (Sec. 2.1, "we omit the id … and allow automatic
assignment by the environment") a step names object *classes*; the ``(1)`` in the script form is the
instance placeholder, and :mod:`groundplan.envs.virtualhome.simulator` assigns the concrete node id.

Parsing is by exact template: a text is a step only if it equals a template with every argument
slot filled by a known object name, so "put on shirt" (wear) and "put shirt on table" (place) never
get confused the way prefix matching would confuse them.

Two sets of steps, on purpose:

- the *labels* (template × the objects each slot's property rule allows, plus every step of the
  dataset's programs) are what planners choose from and what translation embeds;
- the *executable* steps (``parse(..., strict=False)``) are every template × every object class of the
  scene, the character, rooms and floors included: any of them goes to the simulator, whose own
  preconditions decide, so no step the simulator would run is refused before it sees it (e.g.
  ``[WALK] <character>``, ``[PUTBACK] <keyboard> <computer>``, ``[PUTIN] <water> <hands_both>``).
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

#: script action -> natural-language template (Appendix A.4); "{0}", "{1}" are the object slots
TEMPLATES: dict[str, str] = {
    "CLOSE": "close {0}",
    "CUT": "cut {0}",
    "DRINK": "drink {0}",
    "DROP": "drop {0}",
    "EAT": "eat {0}",
    "FIND": "find {0}",
    "GRAB": "grab {0}",
    "GREET": "greet {0}",
    "LIE": "lie on {0}",
    "LOOKAT": "look at {0}",
    "MOVE": "move {0}",
    "OPEN": "open {0}",
    "PLUGIN": "plug in {0}",
    "PLUGOUT": "plug out {0}",
    "POINTAT": "point at {0}",
    "POUR": "pour {0} into {1}",
    "PULL": "pull {0}",
    "PUSH": "push {0}",
    "PUTBACK": "put {0} on {1}",
    "PUTIN": "put {0} in {1}",
    "PUTOBJBACK": "put back {0}",
    "PUTOFF": "take off {0}",
    "PUTON": "put on {0}",
    "READ": "read {0}",
    "RINSE": "rinse {0}",
    "RUN": "run to {0}",
    "SCRUB": "scrub {0}",
    "SIT": "sit on {0}",
    "SLEEP": "sleep",
    "SQUEEZE": "squeeze {0}",
    "STANDUP": "stand up",
    "SWITCHOFF": "switch off {0}",
    "SWITCHON": "switch on {0}",
    "TOUCH": "touch {0}",
    "TURNTO": "turn to {0}",
    "TYPE": "type on {0}",
    "WAKEUP": "wake up",
    "WALK": "walk to {0}",
    "WASH": "wash {0}",
    "WATCH": "watch {0}",
    "WIPE": "wipe {0}",
}
#: number of object arguments of each action
ARITY: dict[str, int] = {a: t.count("{") for a, t in TEMPLATES.items()}

#: object properties (any of) the arguments of two-object actions need, so that the action set is
#: "all combinations of atomic actions and allowed arguments" (the paper's bank has 47,522 steps;
#: this one 40,560). One-object actions take every object: the simulator's executors, not its
#: ``Action`` enum, decide what works (e.g. "type on keyboard" runs although keyboards lack HAS_SWITCH).
_MOVABLE = ("GRABBABLE", "POURABLE", "DRINKABLE")
_TARGET = ("SURFACES", "CONTAINERS", "CAN_OPEN", "RECIPIENT")
ARG_PROPERTIES: dict[str, tuple[tuple[str, ...], ...]] = {
    "PUTBACK": (_MOVABLE, _TARGET),
    "PUTIN": (_MOVABLE, _TARGET),
    "POUR": (("POURABLE", "DRINKABLE"), _TARGET),
}

#: graph categories that are structure, not things to act on (walls, floors, ceilings)
STRUCTURAL_CATEGORIES = frozenset({"Walls", "Ceiling", "Floor", "Floors", "Characters"})

_SCRIPT_RE = re.compile(r"^\[(\w+)\]((?:\s*<[^<>]+>\s*\([0-9.]+\))*)\s*$")
_SCRIPT_ARG_RE = re.compile(r"<([^<>]+)>\s*\(([0-9.]+)\)")


def object_text(class_name: str) -> str:
    """``dining_room`` → ``dining room`` (the words an LM sees)."""
    return class_name.replace("_", " ")


def normalise_text(text: str) -> str:
    """Lower case, single spaces, no trailing period: the form in which labels are compared."""
    return " ".join(text.strip().rstrip(".").strip().lower().split())


@dataclass(frozen=True)
class Step:
    """One step: the script action and its object classes (``("cup", "table")``)."""

    action: str
    args: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """Natural-language form, e.g. ``"put cup on table"``."""
        return TEMPLATES[self.action].format(*(object_text(a) for a in self.args))

    @property
    def script(self) -> str:
        """Script form with the instance placeholder, e.g. ``"[PUTBACK] <cup> (1) <table> (1)"``."""
        return " ".join([f"[{self.action}]", *(f"<{a}> (1)" for a in self.args)])

    def script_with_ids(self, ids: Sequence[int]) -> str:
        """Script form with concrete node ids, as the simulator's executor (instance selection) wants."""
        return " ".join([f"[{self.action}]", *(f"<{a}> ({i})" for a, i in zip(self.args, ids))])


class ParseError(ValueError):
    """A text or script line that is not a step of this action space; the message says why."""


class ActionSpace:
    """The admissible steps of one scene: every template × the objects its slots allow.

    ``labels`` is the list of natural-language labels (stable order: by action, then objects);
    :meth:`parse` maps a text or script line to a :class:`Step` by exact template and raises
    :class:`ParseError` with the reason otherwise; :meth:`label` and :meth:`script` convert back.
    """

    def __init__(self, objects: Mapping[str, Iterable[str]], extra: Iterable[Step] = (),
                 executable_objects: Iterable[str] = ()) -> None:
        """``objects``: class name → its properties (the union over the class's nodes); ``extra``:
        steps admitted beyond the property rules (the env adds every step of the dataset's human
        programs, e.g. "pour water into hands both"), appended after the generated ones;
        ``executable_objects``: further classes a step may name to be passed to the simulator
        (``parse(..., strict=False)``) without being labels: the character, rooms, floors, walls."""
        self.objects: dict[str, frozenset[str]] = {c: frozenset(p) for c, p in sorted(objects.items())}
        #: every class a step may name for the simulator to judge (labels' objects included)
        self.executable_objects: frozenset[str] = frozenset(self.objects) | frozenset(executable_objects)
        self._by_text = self._text_map(self.objects)
        self._by_text_any = self._text_map(self.executable_objects)
        self.steps: list[Step] = []
        for action in TEMPLATES:
            for args in itertools.product(*(self._allowed(action, i) for i in range(ARITY[action]))):
                if len(set(args)) == len(args):
                    self.steps.append(Step(action, tuple(args)))
        known = set(self.steps)
        for step in extra:
            if step not in known and all(a in self.objects for a in step.args):
                self.steps.append(step)
                known.add(step)
        self.labels: list[str] = [s.text for s in self.steps]
        self._index: dict[str, int] = {label: i for i, label in enumerate(self.labels)}
        if len(self._index) != len(self.labels):  # two steps with one text would break the mapping
            raise ValueError("the action space has duplicate labels")
        self._patterns = [
            (action, re.compile("^" + re.escape(t).replace(r"\{0\}", "(.+)").replace(r"\{1\}", "(.+)") + "$"))
            for action, t in TEMPLATES.items()
        ]

    @staticmethod
    def _text_map(names: Iterable[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for name in sorted(names):
            text = object_text(name)
            if text in out and out[text] != name:
                raise ValueError(f"object classes {out[text]!r} and {name!r} read the same")
            out[text] = name
        return out

    def _allowed(self, action: str, slot: int) -> list[str]:
        need = ARG_PROPERTIES.get(action, ((),) * ARITY[action])[slot]
        return [c for c, props in self.objects.items() if not need or props & set(need)]

    def __len__(self) -> int:
        return len(self.labels)

    def __contains__(self, label: str) -> bool:
        return normalise_text(label) in self._index

    def step_of(self, label: str) -> Step:
        """The step of an admissible label (exact, after :func:`normalise_text`)."""
        i = self._index.get(normalise_text(label))
        if i is None:
            return self.parse(label)  # raises with the reason
        return self.steps[i]

    def parse(self, text: str, strict: bool = True) -> Step:
        """A natural-language step or a script line → its :class:`Step`, by exact template.

        ``strict`` (default): only the labels' steps. ``strict=False``: any template filled with any
        class of :attr:`executable_objects`, for the simulator to judge (the env executes steps so).
        Raises :class:`ParseError` naming the problem: no template fits, an unknown object, a wrong
        number of objects, or (strict) an object that the action does not accept.
        """
        raw = text.strip()
        if raw.startswith("["):
            return self._parse_script(raw, strict)
        norm = normalise_text(raw)
        if not norm:
            raise ParseError("empty step")
        i = self._index.get(norm)
        if i is not None:
            return self.steps[i]
        by_text = self._by_text if strict else self._by_text_any
        fits, unknown = [], []
        for action, pattern in self._patterns:
            m = pattern.match(norm)
            if not m:
                continue
            names = [by_text.get(g.strip()) for g in m.groups()]
            if all(names):
                fits.append(Step(action, tuple(names)))  # type: ignore[arg-type]
            else:
                unknown.extend(g.strip() for g, n in zip(m.groups(), names) if not n)
        if fits and not strict:
            return fits[0]
        if fits:
            step = fits[0]
            raise ParseError(f"'{norm}' is not admissible: {step.action} does not take {', '.join(step.args)}")
        if unknown:
            raise ParseError(f"'{norm}' names no object in the scene: {', '.join(dict.fromkeys(unknown))}")
        raise ParseError(f"'{norm}' matches no action template")

    @staticmethod
    def script_step(line: str) -> Step:
        """The :class:`Step` of a script line without checking admissibility (for building spaces)."""
        m = _SCRIPT_RE.match(line.strip())
        if not m or m.group(1).upper() not in TEMPLATES:
            raise ParseError(f"'{line}' is not a script line of a known action")
        return Step(m.group(1).upper(), tuple(a.strip() for a, _ in _SCRIPT_ARG_RE.findall(m.group(2))))

    def _parse_script(self, line: str, strict: bool = True) -> Step:
        m = _SCRIPT_RE.match(line)
        if not m:
            raise ParseError(f"'{line}' is not a script line '[ACTION] <object> (n) ...'")
        action = m.group(1).upper()
        if action not in TEMPLATES:
            raise ParseError(f"'{line}': unknown action {action}")
        args = tuple(a.strip() for a, _ in _SCRIPT_ARG_RE.findall(m.group(2)))
        if len(args) != ARITY[action]:
            raise ParseError(f"'{line}': {action} takes {ARITY[action]} object(s), got {len(args)}")
        step = Step(action, args)
        if not strict:
            missing = [a for a in args if a not in self.executable_objects]
            if missing:
                raise ParseError(f"'{line}' names no object in the scene: {', '.join(missing)}")
            return step
        if step.text not in self._index:
            missing = [a for a in args if a not in self.objects]
            if missing:
                raise ParseError(f"'{line}' names no object in the scene: {', '.join(missing)}")
            raise ParseError(f"'{line}' is not admissible: {action} does not take {', '.join(args)}")
        return step

    def label(self, step_or_text: Step | str) -> str:
        """Natural-language label of a step or of a script line."""
        step = step_or_text if isinstance(step_or_text, Step) else self.parse(step_or_text)
        return step.text

    def script(self, step_or_text: Step | str) -> str:
        """Script line (instance placeholder ``(1)``) of a step or a natural-language label."""
        step = step_or_text if isinstance(step_or_text, Step) else self.parse(step_or_text)
        return step.script
