"""bench_train_say end to end on a tiny random Llama and a handful of Say decisions: both sides train, the packed
loss equals each sequence's loss alone (the packing's masks hold), the chains hold fewer tokens than the decisions
one by one, and the last line names every figure."""
from __future__ import annotations

import json


def test_tiny_examples_give_the_result_line(load_benchmark, tmp_path, capsys):
    from tests.conftest import tiny_llama_lm

    bench = load_benchmark("bench_train_say")
    tiny_llama_lm(tmp_path / "tiny", seed=5)
    examples = []  # three trajectories of two decisions, each second prompt extending the first: three chains
    for i in range(3):
        first = f"[Goal] pick up the ball\n[Initial State] Room {i} has a ball.\n[Step 1]"
        examples += [{"prompt": first, "completion": " go to ball\n", "traj_id": f"t{i}", "step": 0},
                     {"prompt": first + " go to ball\n[Step 2]", "completion": " pick up ball\n", "traj_id": f"t{i}",
                      "step": 1}]
    path = tmp_path / "examples-x.json"
    path.write_text(json.dumps({"train": examples}))
    bench.main(["--examples-file", str(path), "--model", str(tmp_path / "tiny"), "--examples", "6", "--rounds", "2",
                "--max-length", "64", "--precision", "float32"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    fields = dict(kv.split("=") for kv in last.removeprefix("result: ").split())
    assert last.startswith("result: ") and {"plain_dec_s", "groundplan_dec_s", "speedup", "plain_tok_s",
                                            "groundplan_tok_s", "packed_loss_gap", "groundplan_peak_fraction",
                                            "precision"} <= set(fields)
    assert float(fields["packed_loss_gap"]) < 1e-4 and fields["precision"] == "float32" and fields["decisions"] == "6"
    assert float(fields["groundplan_tok_s"]) / float(fields["groundplan_dec_s"]) < float(fields["plain_tok_s"]) / float(
        fields["plain_dec_s"])  # the chains hold fewer tokens for the same decisions
