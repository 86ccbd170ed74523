"""What SayCanPay's two Ravens tasks on the tabletop (Tower of Hanoi, put blocks in bowls) share: the
family check, one PyBullet world per instance, step counters as episode metrics, failed steps that carry
their reason, and the configured camera images."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from groundplan.core.errors import InvalidInputError
from groundplan.core.types import StepResult, Task
from groundplan.envs.base import Env
from groundplan.envs.tabletop.ravens_options import _RavensOptions
from groundplan.envs.tabletop.world import TabletopWorld


def normalise_skill(skill: str) -> str:
    """A skill label as the Ravens tasks parse it: lower case, single spaces, no closing full stop."""
    return " ".join(skill.strip().lower().rstrip(".").split())


class RavensTaskEnv(Env):
    """Base of :class:`~.hanoi.HanoiEnv` and :class:`~.blocks_bowls.BlocksBowlsEnv`."""

    families: tuple[str, ...] = ()
    config: _RavensOptions
    world: TabletopWorld
    _stats: dict[str, float]
    _rng: np.random.Generator

    def _check_families(self, families: Sequence[str] | None) -> None:
        if families is not None and (bad := [f for f in families if f not in self.families]):
            raise InvalidInputError(f"unknown {self.name} families {bad}; valid: {', '.join(self.families)}")

    def episode_metrics(self, task: Task, trace: Any) -> dict[str, float]:
        return {k: float(v) for k, v in self._stats.items()}

    def close(self) -> None:
        self.world.close()

    def _fail(self, skill: str, reason: str, admissible: bool = True) -> StepResult:
        return StepResult(False, f"cannot '{skill.strip()}': {reason}", self._observe(),
                          info={"admissible": admissible, "reason": reason})

    def _pick_and_place(self, name: str, pick_xy: Sequence[float], place_xy: Sequence[float], z: float,
                        **kwargs: Any) -> Any:
        """The Panda moves ``name`` from ``pick_xy`` to ``place_xy`` at height ``z``, each point with the
        configured Gaussian noise (drawn pick first, then place, also when a std is 0, so episodes keep
        their random streams); counts the pick and its simulation steps."""
        c = self.config
        pick = np.asarray(pick_xy[:2]) + self._rng.normal(0, c.pick_noise_std, 2) * (c.pick_noise_std > 0)
        place = np.asarray(place_xy[:2]) + self._rng.normal(0, c.place_noise_std, 2) * (c.place_noise_std > 0)
        result = self.world.pick_and_place(name, pick, (float(place[0]), float(place[1]), z), **kwargs)
        self._stats["picks"] += 1
        self._stats["sim_steps"] += result.sim_steps
        return result

    @staticmethod
    def _landed(what: str, where: str, ok: bool, grasped: bool) -> str:
        """Feedback on a pick-and-place: where ``what`` ended up, or that it missed ``where``."""
        if ok:
            return f"the {what} is in {where}"
        return f"the {what} did not land in {where}" + ("" if grasped else " (nothing was grasped)")

    def _images(self) -> dict[str, Any]:
        c = self.config
        return {f"{cam}_rgb": self.world.render(cam, c.image_width, c.image_height)[0] for cam in c.cameras}
