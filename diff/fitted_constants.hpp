// Constants recovered from the actual values, for bugs that set a hyperparameter to a value
// nobody listed (a misread rope_freq_base, an epsilon from another model): the op's variant
// with the fitted constant is then replayed and judged like any other.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "reference/ops.hpp"

namespace tapdiff::diff {

// The frequency base that rotates x into y at `position` (x, y: one row of n_heads heads).
// Each pair's angle is read off atan2 and turned into a base through
// angle_i = position * base^(-2i / n_rot); the median over the pairs whose angle is well
// measured and unwrapped. Nothing when no pair qualifies.
std::optional<double> fit_rope_base(const std::vector<float>& x, const std::vector<float>& y, int n_heads,
                                    int head_dim, int n_rot, std::int64_t position, ref::Pairing pairing);

// The c of y = c x by least squares; nothing when x is all zero or the rows differ in length.
std::optional<double> fit_scale(const std::vector<float>& x, const std::vector<float>& y);

// The k of actual = softmax(k x scores) where correct = softmax(scores), per head of rows of
// n_head heads: the slope of log(actual) over log(correct), pooled over the heads' keys both
// give weight. Nothing when the rows differ in size or correct is flat.
std::optional<double> fit_score_scale(const std::vector<float>& actual, const std::vector<float>& correct,
                                      int n_head);

// Which of n_options sources each head of `actual` (a row of n_head equal blocks) holds:
// source(h, k) is the block head h would hold from source k (null: none). A head's fit must be
// clear: its squared error within 1% of the head's own squared size and at most a quarter of the
// next source's. Nothing when a head has no clear fit.
std::optional<std::vector<int>> fit_head_sources(const std::vector<float>& actual, int n_head, int n_options,
                                                 const std::function<const float*(int head, int source)>& source);

// The epsilon of y = x / sqrt(mean(x²) + eps) * w (w may be null), by least squares on the
// scale y / (x w); nothing when the row does not look like a scaled x (or the fit is < 0).
std::optional<double> fit_rms_eps(const std::vector<float>& x, const std::vector<float>& y, const float* w);

// The constants (k, c) of a tanh GELU, act = 0.5 g (1 + tanh(k (g + c g³))) · up, read off a row
// (0.7978845608 = sqrt(2 / pi) and 0.044715 in the model): atanh(2 act / (g up) - 1) is
// k g + k c g³, fitted by least squares over the elements where that is well measured. Nothing
// when too few are, or the fit is not a GELU's shape (k <= 0).
struct GeluConstants {
  double k = 0, c = 0;
};
std::optional<GeluConstants> fit_gelu_constants(const std::vector<float>& gate, const std::vector<float>& up,
                                                const std::vector<float>& act);

// The limit c of a clamped SwiGLU, act = silu(min(gate, c)) · clamp(up, -c, c) (gpt-oss's
// swiglu_limit): c can be no larger than the smallest max(gate, |up|) of an element the clamp
// changed, and the c up to that bound whose act is nearest the row, by a scan refined by
// golden-section search. Nothing when no element differs from the unclamped SwiGLU, or no c
// comes nearer than none.
inline double swiglu_clamped(double gate, double up, double c) {
  return ref::silu(std::min(gate, c)) * std::clamp(up, -c, c);
}
std::optional<double> fit_swiglu_limit(const std::vector<float>& gate, const std::vector<float>& up,
                                       const std::vector<float>& act);

// The elements of actual = without + b on which the bias b was added (a bias applied at
// another row's width, or to some heads only): each element whose bias stands out of the row's
// own rounding goes to whichever of b and 0 its offset is near; the others follow the element
// before them. Nothing when an offset is near neither, or the bias went everywhere or nowhere.
std::optional<std::vector<bool>> fit_bias_mask(const std::vector<float>& without, const std::vector<float>& actual,
                                               const std::vector<float>& b);

}  // namespace tapdiff::diff
