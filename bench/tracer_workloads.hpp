// The tracer benchmark's workloads: the same tap bytes written through TraceWriter and raw
// into one HDF5 dataset, and the cost of enabled() for disabled taps.
#pragma once

#include <cstdint>
#include <string>

namespace tapdiff::bench {

struct TapWorkload {
  int layers = 30;
  int taps = 20;  // per layer
  int positions = 128;
  int width = 576;  // floats per row
  std::int64_t bytes() const {
    return std::int64_t{layers} * taps * positions * width *
           static_cast<std::int64_t>(sizeof(float));
  }
};

// Seconds from creating the file to closing it.
// prefill: positions of a first, batched step (0: none); then rows_per_step positions a step
// (1 is decode, positions is one batched prefill step).
double time_tracer(const TapWorkload& w, int prefill, int rows_per_step, int commit_every, bool compress,
                   const std::string& path);
// One (layers*taps*positions, width) float32 dataset, chunked like the tracer's, appended with
// one H5Dwrite per step (the same rows a tracer step writes) and flushed per step.
double time_raw(const TapWorkload& w, int rows_per_step, const std::string& path);

// The same bytes written with raw HDF5 calls in two file layouts, committed like the tracer
// commits (rows, H5Fflush, a (n_taps, 2) count table, H5Fflush) after every step, with no
// tracer code in the way: what each layout allows at best.
//   per_tap:   trace format 1.0's: a group with its four attributes, a chunked `data` and a
//              `runs` dataset per tap; one H5Dwrite per tap per step.
//   per_name:  format 2.0's stacks: one (rows, layers, width) dataset per tap name, one chunk
//              per row; one H5Dwrite per name per step, every layer's rows side by side.
//   layer_major: one (layers, rows, width) dataset per tap name, chunked a layer and a step's
//              rows (at least 64 KiB) at a time; one H5Dwrite per name per layer per step,
//              straight from the rows as a layer produces them (a prefill's layer arrives with
//              every position at once): format 3.0's `batch`, for every step.
enum class RawLayout { per_tap, per_name, layer_major };
double time_raw_layout(const TapWorkload& w, int rows_per_step, RawLayout layout,
                       const std::string& path);

// Nanoseconds per enabled() call that returns false, cycling through the workload's taps.
// kind: "name" (glob rejects), "layer" (layer range rejects), "position" (position range).
double disabled_call_ns(const TapWorkload& w, const std::string& kind, std::int64_t calls,
                        const std::string& path);

}  // namespace tapdiff::bench
