// The rows of tap pairs (one tap in each of two traces), read on a thread of its own, up to
// kBatchesAhead batches ahead of the caller: HDF5 reads while diff measures. Reading and
// measuring take about as long (bench/results/models.md, "Diff throughput"), and HDF5 is only
// ever called from one thread at a time: the caller must not use either TraceReader while a
// PairReader lives.
//
// A batch is a range of positions of consecutive pairs (in the order given) whose taps lie in
// the same stack in each trace: those are read with one HDF5 read per trace straight into the
// batch's memory, every slot of the stack at once (no copy), a few MB at a time so that the
// memory stays small and warm (fresh pages cost as much as reading them here). A long prompt's
// rows that a stack keeps in its slot-major `batch` are read pair by pair, or, against a trace that
// keeps them in `data`, that trace's as a stack beside them (read_group).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "tapdiff/float_memory.hpp"
#include "tapdiff/trace_reader.hpp"

namespace tapdiff::diff {

using TapPair = std::pair<const TapInfo*, const TapInfo*>;

// Rows of one pair at some positions; a pair's parts arrive in increasing positions.
struct PairRows {
  std::size_t pair = 0;  // index in the order given
  std::vector<std::int64_t> positions_a, positions_b;
  std::int64_t row_size = 0;  // of both: a shard's size where one trace holds a shard
  const float* a = nullptr;   // row i at a + i * stride_a
  const float* b = nullptr;
  std::size_t stride_a = 0, stride_b = 0;
  std::vector<float> kept;  // whole rows cut to the other trace's shard
};

class PairReader {
public:
  static constexpr std::int64_t kBatchBytes = 8 << 20;  // of rows, both traces; at least one position
  // Where one trace keeps a prompt's rows slot-major and the other position-major: at most this
  // much, to read as many positions at a time as a slot-major chunk holds.
  static constexpr std::int64_t kMixedBatchBytes = 64 << 20;
  // A prompt's rows are read as a stack while that reads each batch chunk at most this often.
  static constexpr std::int64_t kChunkRereads = 16;

  // Rows of positions 0..last_position of each pair.
  PairReader(const TraceReader& a, const TraceReader& b, std::vector<TapPair> pairs, std::int64_t last_position,
             std::int64_t batch_bytes = kBatchBytes);
  ~PairReader();
  PairReader(const PairReader&) = delete;
  PairReader& operator=(const PairReader&) = delete;

  // The next part of a pair's rows, valid until the following call; nullptr after the last.
  // Rethrows an error the reading thread met.
  const PairRows* next();

private:
  static constexpr int kBatchesAhead = 3;
  struct Batch {
    std::vector<PairRows> rows;  // one per pair of the batch
    FloatBuffer memory;
  };
  // Pairs [first, end) read together: in each trace as a stack (every slot in one read; slots_a,
  // slots_b the stacks' slot counts) or pair by pair (a slot count 0).
  struct Group {
    std::size_t first = 0, end = 0;
    std::int64_t slots_a = 0, slots_b = 0;
    bool stacked() const { return slots_a > 0 && slots_b > 0; }
  };

  void read_all();
  Group group_at(std::size_t first) const;
  void read_group(const Group& group, std::size_t& batch_index);
  void read_positions(const Group& group, std::int64_t lo_position, std::int64_t hi_position,
                      std::int64_t batch_bytes, std::size_t& batch_index);
  bool wait_for_room(std::size_t batch_index);
  void publish();

  const TraceReader& a_;
  const TraceReader& b_;
  const std::vector<TapPair> pairs_;
  const std::int64_t last_position_;
  const std::int64_t batch_bytes_;
  Batch batches_[kBatchesAhead];

  std::mutex mutex_;
  std::condition_variable changed_;
  std::size_t read_ = 0;      // batches read (batch i is in batches_[i % kBatchesAhead])
  std::size_t consumed_ = 0;  // batches the caller is done with
  bool stop_ = false;         // the caller is gone
  bool done_ = false;         // the reading thread has stopped
  std::exception_ptr error_;

  std::size_t batch_ = 0, in_batch_ = 0;  // the caller's place
  bool started_ = false;
  std::thread thread_;
};

}  // namespace tapdiff::diff
