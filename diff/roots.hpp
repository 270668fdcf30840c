// Independent roots (DiffResult::roots). Every diverged tap, in execution order, either starts
// a new root or joins the earlier root that explains it:
// - all (normal traces): a tap diverges by the jump test, or carries a root's error in rows
//   that its op replayed from the actual trace's own inputs does not give (a bug the first one's
//   error hid). It joins a root when one of its inputs (tap_graph) is over tolerance at its
//   diverged positions because of that root, and replaying the op from the actual trace's own
//   inputs reproduces it (the op itself is right, its inputs were wrong). Otherwise it is a new
//   root: a second bug downstream of the first.
// - lockstep: every tap over its tolerance diverges (inputs were exact). Ops ran on the
//   expected values, so an input's own error explains nothing; only a tap computed from a
//   diverged input without a tap point between them (attn.out from attn.probs: one kernel)
//   joins its input's root.
// In both, a diverged tap next to a root's tap with the same diagnosed class joins it: same
// layer and same inputs (attn_q/k/v, ffn_gate/up), the same kernel (attn.probs/attn.out), or
// the same kind of op reproduced by the same hypothesis (RoPE on q and k, both norms). The kind of
// op a root already holds in another layer, reproduced by the same hypothesis, joins it too:
// one bug in the code every layer runs is one finding, however many layers show it; so is an op
// reading a weight of the type whose decoder a root named, an op computed right from what a
// root's tap holds (attention over the cache as read back), and, under a root's error, the same
// op with the same class. Taps
// whose row shapes differ become "shape" roots the same way (a tap fed by a shape-mismatched
// tap joins its root).
#pragma once

#include <string>

#include "diff/result.hpp"
#include "tapdiff/trace_reader.hpp"

namespace tapdiff::diff {

// Fills r.roots for r.mode; first mode copies r.first and r.diagnosis. diagnose: hypothesis
// replay per root (model_path as for diagnose()).
void find_roots(DiffResult& r, const TraceReader& expected, const TraceReader& actual, bool diagnose,
                const std::string& model_path);

}  // namespace tapdiff::diff
