"""Writing a matplotlib figure, the one way every picture groundplan and its benchmarks draw is saved."""
from __future__ import annotations

from pathlib import Path
from typing import Any


def save_figure(fig: Any, path: str | Path, dpi: float | None = None, **layout: Any) -> Path:
    """Lay out ``fig`` (``tight_layout(**layout)``), write it to ``path`` (its folder made) and close it: the one
    ending of every picture groundplan and its benchmarks draw."""
    import matplotlib.pyplot as plt

    fig.tight_layout(**layout)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
