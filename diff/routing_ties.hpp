// Experts chosen differently at a near tie of the router: where both traces record a layer's
// router logits (ffn_gate_inp) within tolerance, and the n_expert_used experts each run's own
// logits pick differ only in experts whose expected logits are within the precision's noise of
// each other, the two runs' experts' taps at that position differ by whole experts, not by a
// bug. Those rows are not divergences; the taps after them carry the difference as input error
// (the jump test), and a note says where it happened.
#pragma once

#include "diff/result.hpp"
#include "diff/tolerance.hpp"
#include "tapdiff/trace_reader.hpp"

namespace tapdiff::diff {

// Clears the divergence of the experts' rows (ffn.routing, ffn_gate_exps, ffn_up_exps,
// ffn.act_exps, ffn_down) at every near tie, and notes each layer's ties as one finding.
void clear_routing_ties(DiffResult& r, const TraceReader& expected, const TraceReader& actual,
                        const ToleranceProfile& profile);

}  // namespace tapdiff::diff
