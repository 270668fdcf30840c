"""A mixture of experts (qwen3moe, 8 experts, 2 a token): bugs written into the experts' taps and a
routing bug behind unrecorded ops, each named where it starts; an engine that records the chosen
experts in the top-k's order is told its rows are laid out otherwise, not that its numbers are wrong."""
import gguf
import numpy as np
import pytest

from bug_traces import PROMPT, diff_json, read_tap, run, traced, write_tap


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    d = tmp_path_factory.mktemp("qwen3moe")
    traced(d, "qwen3moe", "--arch", "qwen3moe", "--head-dim", "32", "--seed", "5", n=5)
    return d


def experts_of(routing):
    """Each position's used experts, ascending: its routing row's nonzero weights."""
    return [np.nonzero(row)[0] for row in routing]


def test_experts_rows_in_the_top_k_order_are_a_layout_not_a_bug(moe, tmp_path):
    eng = tmp_path / "topk.h5"
    eng.write_bytes((moe / "eng.h5").read_bytes())
    for layer in (0, 1):
        routing = read_tap(eng, "ffn.routing", layer)
        for name in ("ffn_gate_exps", "ffn_up_exps", "ffn.act_exps"):
            rows = read_tap(eng, name, layer).reshape(len(routing), 2, -1)
            for p, used in enumerate(experts_of(routing)):
                rows[p] = rows[p][np.argsort(-routing[p][used], kind="stable")]
            write_tap(eng, name, layer, rows)
    code, r = diff_json(moe / "ref.h5", eng, "--model", moe / "qwen3moe.gguf")
    d = r["diagnosis"]
    assert code == 1 and r["first_divergence"]["tap"] == "blk.0.ffn_gate_exps", r["first_divergence"]
    assert (d["class"], d["evidence"]) == ("tap-layout", "reproduced") and "descending routing weight" in d["variant"], d


@pytest.mark.parametrize("shift, words", [(1, "e + 1's matrix"), (-1, "e - 1's matrix")])
def test_an_expert_reading_the_next_experts_matrix_is_weight_loading(moe, tmp_path, shift, words):
    """Expert e's gate rows computed with expert e ± 1's matrix: an index or stride into the stacked
    tensor one expert off (e - 1 was unexplained: blind round 25, B05)."""
    eng = tmp_path / "next.h5"
    eng.write_bytes((moe / "eng.h5").read_bytes())
    reader = gguf.GGUFReader(str(moe / "qwen3moe.gguf"))
    t = next(t for t in reader.tensors if t.name == "blk.0.ffn_gate_exps.weight")
    stacked = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)  # [experts, n_ff, n_embd]
    x, routing = read_tap(eng, "ffn_norm", 0), read_tap(eng, "ffn.routing", 0)
    rows = np.stack([np.concatenate([stacked[(e + shift) % len(stacked)] @ x[p] for e in used])
                     for p, used in enumerate(experts_of(routing))])
    write_tap(eng, "ffn_gate_exps", 0, rows.reshape(len(rows), 2, -1))
    code, r = diff_json(moe / "ref.h5", eng, "--model", moe / "qwen3moe.gguf")
    d = r["diagnosis"]
    assert code == 1 and r["first_divergence"]["tap"] == "blk.0.ffn_gate_exps", r["first_divergence"]
    assert (d["class"], d["evidence"]) == ("weight-loading", "reproduced") and words in d["variant"], d


def test_a_routing_bug_behind_unrecorded_ops_is_named_at_the_hidden_state(moe, tmp_path):
    sparse = tmp_path / "sparse.h5"
    p = run("run", "--backend", "host", "-m", moe / "qwen3moe.gguf", "--tokens", PROMPT, "-n", 5, "--inject",
            "moe-weights-unnormalized", "--taps", "blk.*.resid.ffn,output_norm,output", "-o", sparse)
    assert p.returncode == 0, p.stderr
    code, r = diff_json(moe / "ref.h5", sparse, "--model", moe / "qwen3moe.gguf")
    d = r["diagnosis"]
    assert code == 1 and r["first_divergence"]["tap"] == "blk.0.resid.ffn", r["first_divergence"]
    assert (d["class"], d["evidence"]) == ("moe-routing", "reproduced"), d
    assert "blk.0.ffn.routing, which the trace does not record" in d["variant"] and "not renormalized" in d["variant"], d
