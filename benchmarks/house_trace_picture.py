"""Top-down picture of one house episode: rooms, doors, the agent's path, the targets and the scene-graph
nodes the planner built (SayNav Fig. 2 style), for docs/results/saynav.md and for looking at what a planner did.

    python benchmarks/house_trace_picture.py --config configs/saynav_house_learned.yaml \
        --planner "SayNav (score)" --house 3 --set env.options.perception=noisy --out docs/house_trace_saynav.png
"""
from __future__ import annotations

import argparse
import logging

from PIL import Image

from groundplan.config import load_config
from groundplan.factory import make_env, make_llm, make_planner
from groundplan.planners.nav_common import GeneratorPlanner
from groundplan.rollout.episode import run_episode


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="configs/saynav_house.yaml")
    ap.add_argument("--planner", default="SayNav (score)", help="a planner label of the config")
    ap.add_argument("--house", type=int, default=0, help="index of the test house")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--px", type=int, default=12, help="pixels per grid cell")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    cfg = load_config(args.config, list(args.set))
    spec = next((p for p in cfg.planners if p.label == args.planner or p.display == args.planner), None)
    if spec is None:
        raise SystemExit(f"no planner {args.planner!r} in {args.config}: {[p.label for p in cfg.planners]}")
    env = make_env(cfg.env)
    task = env.tasks()[args.house]
    planner = make_planner(spec, make_llm(cfg.llm), cfg.max_steps)
    trace = run_episode(planner, env, task, seed=args.seed)
    nodes = planner.graph.nodes_for_render() if isinstance(planner, GeneratorPlanner) else []
    Image.fromarray(env.render(graph_nodes=nodes, px=args.px)).save(args.out)
    m = trace.metrics
    print(f"{task.task_id} ({task.instruction}): sr={m.get('sr')} spl={m.get('spl', 0):.3f} path={m.get('path_m', 0):.1f} m "
          f"-> {args.out}")


if __name__ == "__main__":
    main()
