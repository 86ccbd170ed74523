"""The per-round table and plot of a ``groundplan improve`` run, rendered from its ``improve.json`` alone
(so ``docs/results`` can re-render them from the committed file)."""
from __future__ import annotations

from pathlib import Path
from typing import Any


def _cell(m: dict[str, Any] | None) -> str:
    if not m or m.get("rate") is None:
        return "-"
    return f"{m['rate']:.0%} [{m['lo']:.0%}, {m['hi']:.0%}] ({m['successes']}/{m['n']}, {m['clusters']} cl.)"


def _share(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def round_table(state: dict[str, Any]) -> str:
    """Markdown: per round, the model, validation and test success (n episodes, clusters by instruction,
    cluster-aware 95% interval), and what its rollouts kept."""
    head = ("| round | model | validation success | test success | rollouts: success | kept (tasks, new) "
            "| expert solved / length ratio | train examples | val loss |")
    lines = [head, "|" + "---|" * 9]
    for r in state["rounds"]:
        kept = r.get("kept") or {}
        counts = (r.get("train") or {}).get("counts") or {}
        metrics = (r.get("train") or {}).get("metrics") or {}
        ratio = kept.get("length_vs_expert")
        lines.append("| " + " | ".join([
            str(r["round"]), f"`{r.get('model', '-')}`", _cell(r.get("validation")), _cell(r.get("test")),
            _cell(r.get("rollouts")),
            f"{kept['stored']} ({kept['kept_tasks']}, {kept['new_tasks']})" if kept else "-",
            f"{_share(kept.get('expert_solved_share'))} / {'-' if ratio is None else f'{ratio:.2f}x'}" if kept else "-",
            str(counts.get("train_rows", "-")),
            f"{metrics['eval_loss']:.3f}" if "eval_loss" in metrics else "-"]) + " |")
    if state.get("stopped"):
        lines.append("")
        lines.append(f"Stopped: {state['stopped']}.")
    return "\n".join(lines)


def plot_rounds(state: dict[str, Any], path: str | Path, title: str | None = None) -> Path:
    """Validation and test success per round with their 95% intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for role, marker, shift in (("validation", "s", -0.06), ("test", "o", 0.06)):
        pts = [(r["round"], r[role]) for r in state["rounds"] if (r.get(role) or {}).get("rate") is not None]
        if not pts:
            continue
        xs = [x + shift for x, _ in pts]
        ys = [100 * m["rate"] for _, m in pts]
        err = [[100 * (m["rate"] - m["lo"]) for _, m in pts], [100 * (m["hi"] - m["rate"]) for _, m in pts]]
        ax.errorbar(xs, ys, yerr=err, marker=marker, capsize=4, label=f"{role} (n = {pts[-1][1]['n']})")
    ax.set_xlabel("round (0: the start model)")
    ax.set_ylabel("success, % (95% CI)")
    ax.set_xticks([r["round"] for r in state["rounds"]])
    ax.set_ylim(-2, 103)
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    ax.set_title(title or f"groundplan improve: {state['name']}")
    from groundplan.core.figures import save_figure

    return save_figure(fig, path)


#: the markers in a results page between which :func:`render_page` writes a run's table
BEGIN, END = "<!-- improve table: {name} -->", "<!-- /improve table: {name} -->"


def render_page(page: str | Path, states: list[str | Path], figures: str | Path) -> str:
    """Write each committed ``improve.json`` (``states``) into ``page`` between its markers (the table) and
    its plot into ``figures``/<name>.png; returns the page's text. A page without a run's markers is
    refused (the run is not documented there)."""
    import json

    page = Path(page)
    text = page.read_text()
    for path in states:
        state = json.loads(Path(path).read_text())
        begin, end = BEGIN.format(name=state["name"]), END.format(name=state["name"])
        if begin not in text or end not in text:
            raise ValueError(f"{page} has no markers for {state['name']}: add {begin} ... {end}")
        head, rest = text.split(begin, 1)
        text = head + begin + "\n" + round_table(state) + "\n" + end + rest.split(end, 1)[1]
        plot_rounds(state, Path(figures) / f"{state['name']}.png")
    page.write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    """``python -m groundplan.pipelines.improve.report PAGE FIGURES STATE...``: re-render the tables and
    plots of committed runs (docs/results/improve.md from docs/results/data/improve/*.json)."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3:
        raise SystemExit("usage: python -m groundplan.pipelines.improve.report PAGE FIGURES STATE.json...")
    render_page(args[0], args[2:], args[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
