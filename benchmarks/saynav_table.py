"""SayNav's Table 1 on the embedded houses: run configs/saynav_house.yaml (or a selection of its
planners) through the sweep driver and print the MultiON table (SR with 95% Wilson interval, SPL, Kendall tau).

    python benchmarks/saynav_table.py --houses 20 --perception gt --planners "SayNav (score)" "Explore (no LLM)"
"""
from __future__ import annotations

import argparse
import logging

from groundplan.config import load_config
from groundplan.envs.house.summary import markdown_table, multion_rows
from groundplan.pipelines.sweep import run_sweep


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="configs/saynav_house.yaml")
    ap.add_argument("--houses", type=int, default=10)
    ap.add_argument("--perception", choices=["gt", "noisy"], default="gt")
    ap.add_argument("--planners", nargs="*", default=None, help="planner labels to keep (default: all)")
    ap.add_argument("--output", default="outputs")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    cfg = load_config(args.config, [f"tasks.per_family={args.houses}", f"env.options.perception={args.perception}",
                                    f"name=saynav_house_{args.perception}", f"output_dir={args.output}",
                                    "runtime.executor=local"])
    if args.planners:
        cfg.planners = [p for p in cfg.planners if p.display in args.planners]
    result = run_sweep(cfg)
    wanted = {p.display for p in cfg.planners}
    print(markdown_table(multion_rows(t for t in result.traces if t.planner in wanted)))


if __name__ == "__main__":
    main()
