"""The mark a table prints beside a row that read simulator truth, taken from what the row's traces record
as declared (``EpisodeTrace.oracles``, :mod:`groundplan.core.truth`), never from its label.

``†`` marks a row that read an oracle (information its method does not have: a reference plan, the
simulator's feasibility), ``‡`` one whose simulator truth stands in for a learned model or perception the
method has (SayCan App. C.1's value functions computed from the kitchen's state); the footnotes under the
table say what each row read. A trace written before traces recorded declarations (``oracles`` is None)
takes the declarations of its planner in the run's ``config.json``, where that config still loads.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from groundplan.core.truth import (
    ORACLE_MARK,
    STAND_IN_MARK,
    OracleDeclaration,
    unique,
)
from groundplan.rollout.traces import EpisodeTrace

log = logging.getLogger(__name__)

#: the line above a table's footnotes that says what the two marks mean
LEGEND = (f"{ORACLE_MARK} oracle: reads ground truth its method does not have; {STAND_IN_MARK} stand-in: simulator "
          "truth in place of a learned model or perception of the method")


@dataclass
class Marks:
    """The declarations of each row of a table, and the mark and footnotes printed from them."""

    by_row: dict[str, tuple[OracleDeclaration, ...]] = field(default_factory=dict)

    def of(self, row: str) -> tuple[OracleDeclaration, ...]:
        return self.by_row.get(row, ())

    def mark(self, row: str) -> str:
        """``"†"`` for a row that read an oracle, ``"‡"`` for one whose truth stands in for a model, both
        when both; empty for a row that declares nothing."""
        ds = self.of(row)
        return "".join(m for m, on in ((ORACLE_MARK, any(d.is_oracle for d in ds)),
                                       (STAND_IN_MARK, any(d.stands_in for d in ds))) if on)

    def label(self, row: str) -> str:
        """The row's label with its mark, e.g. ``"SayCan (oracle simulator preconditions) †"``."""
        m = self.mark(row)
        return f"{row} {m}" if m else row

    def is_oracle(self, row: str) -> bool:
        """Whether the row declared an oracle (tables sort these after the method rows)."""
        return any(d.is_oracle for d in self.of(row))

    def footnote(self, row: str) -> str | None:
        """The row's mark, label and what each of its declarations reads; None for an unmarked row."""
        ds = self.of(row)
        if not ds:
            return None
        what = "; ".join(f"{d.name}: {d.wording} (reads {', '.join(sorted(t.where for t in d.reads))})" for d in ds)
        return f"{self.mark(row)} {row}: {what}"

    def footnotes(self, rows: Sequence[str] | None = None) -> list[str]:
        """The :data:`LEGEND`, then one :meth:`footnote` per marked row (in ``rows`` order); empty when no
        row is marked."""
        out = [n for row in dict.fromkeys(rows if rows is not None else self.by_row)
               if (n := self.footnote(row)) is not None]
        return [LEGEND, *out] if out else []


def declarations_of(records: Iterable[Mapping[str, Any]] | None) -> tuple[OracleDeclaration, ...]:
    """Declarations as a trace records them (``OracleDeclaration.to_dict``); none for None."""
    return unique(OracleDeclaration.from_dict(d) for d in records or ())


def trace_marks(traces: Iterable[EpisodeTrace]) -> Marks:
    """Each planner label's declarations, as its traces record them (a trace without the record adds none)."""
    by: dict[str, list[OracleDeclaration]] = {}
    for t in traces:
        by.setdefault(t.planner, []).extend(declarations_of(t.oracles))
    return Marks({row: unique(ds) for row, ds in by.items()})


def config_declarations(configs: Sequence[Mapping[str, Any]]) -> dict[str, tuple[OracleDeclaration, ...]]:
    """Planner label -> declarations, from runs' ``config.json``: under each planner's table label
    (``display``, with its grid variants) and the label its config gives it, so a trace labelled before an
    oracle suffix was added finds its planner. A planner whose spec no longer loads is left out (logged)."""
    from groundplan.config import PlannerSpec

    out: dict[str, tuple[OracleDeclaration, ...]] = {}
    for config in configs:
        for data in config.get("planners", []):
            try:
                spec = PlannerSpec.model_validate(data)
                for variant in spec.variants():
                    declared = variant.declarations
                    for label in (variant.display, variant.label or variant.name, spec.display,
                                  spec.label or spec.name):
                        out.setdefault(label, declared)
            except Exception as exc:  # an old config a current plugin refuses: its traces keep what they record
                log.warning("planner %s of a run's config does not load (%s); its old traces are read as "
                            "declaring nothing", data.get("label") or data.get("name"), exc)
    return out


def with_config_declarations(traces: Sequence[EpisodeTrace],
                             configs: Sequence[Mapping[str, Any]]) -> list[EpisodeTrace]:
    """``traces``, those that record no declarations (written before traces did) given their planner's
    declarations from the runs' configs (:func:`config_declarations`)."""
    if all(t.oracles is not None for t in traces):
        return list(traces)
    by_label = config_declarations(configs)
    return [t if t.oracles is not None or t.planner not in by_label
            else dataclasses.replace(t, oracles=[d.to_dict() for d in by_label[t.planner]]) for t in traces]
