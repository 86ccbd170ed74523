"""What SayCanPay's two Ravens tasks on the tabletop (Tower of Hanoi, put blocks in bowls) share: the
family check, one PyBullet world per instance, step counters as episode metrics, failed steps that carry
their reason, and the configured camera images."""
from __future__ import annotations

from typing import Any, Sequence

from groundplan.core.errors import InvalidInputError
from groundplan.core.types import StepResult, Task
from groundplan.envs.base import Env
from groundplan.envs.tabletop.scp_options import _RavensOptions
from groundplan.envs.tabletop.world import TabletopWorld


class RavensTaskEnv(Env):
    """Base of :class:`~.hanoi.HanoiEnv` and :class:`~.blocks_bowls.BlocksBowlsEnv`."""

    families: tuple[str, ...] = ()
    config: _RavensOptions
    world: TabletopWorld
    _stats: dict[str, float]

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

    def _images(self) -> dict[str, Any]:
        c = self.config
        return {f"{cam}_rgb": self.world.render(cam, c.image_width, c.image_height)[0] for cam in c.cameras}
