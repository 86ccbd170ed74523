"""bench_train_say end to end on a tiny random Llama and a handful of Say examples: both sides train, the packed
loss equals each example's loss alone (the packing's masks hold), and the last line names every figure."""
from __future__ import annotations

import json


def test_tiny_examples_give_the_result_line(load_benchmark, tmp_path, capsys):
    from tests.conftest import tiny_llama_lm

    bench = load_benchmark("bench_train_say")
    tiny_llama_lm(tmp_path / "tiny", seed=5)
    examples = [{"prompt": f"[Goal] pick up the ball\n[Initial State] Room {i} has a ball.\n[Step 1]",
                 "completion": " pick up ball\n"} for i in range(6)]
    path = tmp_path / "examples-x.json"
    path.write_text(json.dumps({"train": examples}))
    bench.main(["--examples-file", str(path), "--model", str(tmp_path / "tiny"), "--examples", "6", "--rounds", "2",
                "--max-length", "64", "--precision", "float32"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    fields = dict(kv.split("=") for kv in last.removeprefix("result: ").split())
    assert last.startswith("result: ") and {"plain_tok_s", "groundplan_tok_s", "speedup", "packed_loss_gap",
                                            "groundplan_peak_fraction", "precision"} <= set(fields)
    assert float(fields["packed_loss_gap"]) < 1e-4 and fields["precision"] == "float32" and fields["examples"] == "6"
