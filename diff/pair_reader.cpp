#include "diff/pair_reader.hpp"

#include <algorithm>

namespace tapdiff::diff {
namespace {

// A whole row's part that a shard in the other trace holds (docs/trace-schema.md, "Layouts").
const float* keep_shard(const float* whole, std::size_t n_rows, std::int64_t whole_size, const TapInfo& shard,
                        std::vector<float>& kept) {
  const std::vector<std::int64_t>& covers = shard.alignment->covers;
  kept.resize(n_rows * covers.size());
  for (std::size_t i = 0; i < n_rows; ++i)
    for (std::size_t k = 0; k < covers.size(); ++k)
      kept[i * covers.size() + k] = whole[i * std::size_t(whole_size) + std::size_t(covers[k])];
  return kept.data();
}

bool same_runs(const TapInfo& x, const TapInfo& y) {
  return x.runs.size() == y.runs.size() &&
         std::equal(x.runs.begin(), x.runs.end(), y.runs.begin(), [](const PositionRun& p, const PositionRun& q) {
           return p.first_row == q.first_row && p.first_position == q.first_position && p.n_rows == q.n_rows;
         });
}

bool as_stored(const TapInfo& t) { return !t.alignment && t.stored_size == t.row_size; }

// The first position past the rows `t` keeps in its stack's batch; -1 when it keeps none there.
std::int64_t past_batch(const TapInfo& t) {
  if (t.batch_rows <= 0) return -1;
  const std::vector<std::int64_t> positions = t.positions();
  const auto rows = std::size_t(t.batch_rows);
  return rows < positions.size() ? positions[rows] : positions.back() + 1;
}

}  // namespace

PairReader::PairReader(const TraceReader& a, const TraceReader& b, std::vector<TapPair> pairs,
                       std::int64_t last_position, std::int64_t batch_bytes)
    : a_(a),
      b_(b),
      pairs_(std::move(pairs)),
      last_position_(last_position),
      batch_bytes_(batch_bytes),
      thread_([this] { read_all(); }) {}

PairReader::~PairReader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

// The next pairs in the same two stacks, stored as read and at the same rows (positions) in
// each trace, read as a stack when they are most of both stacks; else `first` alone.
PairReader::Group PairReader::group_at(std::size_t first) const {
  const auto& [a0, b0] = pairs_[first];
  if (!as_stored(*a0) || !as_stored(*b0)) return {first, first + 1};
  std::size_t end = first + 1;
  while (end < pairs_.size()) {
    const auto& [ta, tb] = pairs_[end];
    if (ta->stack != a0->stack || tb->stack != b0->stack || !as_stored(*ta) || !as_stored(*tb) ||
        !same_runs(*ta, *a0) || !same_runs(*tb, *b0))
      break;
    ++end;
  }
  const auto n = std::int64_t(end - first);
  const std::int64_t slots_a = a_.stack_slots(*a0), slots_b = b_.stack_slots(*b0);
  if (2 * n >= slots_a && 2 * n >= slots_b) return {first, end, slots_a, slots_b};
  return {first, first + 1};
}

bool PairReader::wait_for_room(std::size_t batch_index) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return stop_ || batch_index < consumed_ + kBatchesAhead; });
  return !stop_;
}

void PairReader::publish() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++read_;
  }
  changed_.notify_all();
}

// A batch (`batch` in the schema) is slot-major: a slot's rows lie together, in chunks of many
// positions, and attn.probs's in tiles of 64 positions by 64 keys. Read as a stack, a few positions
// of every slot at a time, a long prompt's tiles would be read again for every few positions (a
// 2048-token prompt's diff: 64 s instead of 6). So where both traces batched the prompt its rows
// are read pair by pair, the rest as a stack. Where one trace did not (the reference records a
// position at a time), each is read its own way, a batch chunk's positions at a time: read pair
// by pair, each chunk of the other trace (every slot) would be read once per slot.
void PairReader::read_group(const Group& group, std::size_t& batch_index) {
  std::int64_t split = -1, chunk_rows = 1;
  bool batched_a = false, batched_b = false;
  if (group.stacked())
    for (std::size_t k = group.first; k < group.end; ++k) {
      const TapInfo& ta = *pairs_[k].first;
      const TapInfo& tb = *pairs_[k].second;
      const std::int64_t in_a = past_batch(ta), in_b = past_batch(tb);
      split = std::max({split, in_a, in_b});
      batched_a |= in_a > 0;
      batched_b |= in_b > 0;
      chunk_rows = std::max({chunk_rows, ta.batch_chunk_rows, tb.batch_chunk_rows});
    }
  // A batch chunk's positions of the whole stack in both traces: where they fit a few batches
  // (a short prompt), reading a chunk a few times as a stack costs less than a read per pair.
  const TapInfo& a0 = *pairs_[group.first].first;
  const TapInfo& b0 = *pairs_[group.first].second;
  const std::int64_t chunk_bytes =
      chunk_rows * (group.slots_a * a0.stored_size + group.slots_b * b0.stored_size) * std::int64_t(sizeof(float));
  if (split <= 0 || chunk_bytes <= kChunkRereads * batch_bytes_)
    return read_positions(group, 0, last_position_, batch_bytes_, batch_index);
  const std::int64_t batched_end = std::min(split - 1, last_position_);
  if (batched_a && batched_b) {
    for (std::size_t k = group.first; k < group.end; ++k)
      read_positions({k, k + 1}, 0, batched_end, batch_bytes_, batch_index);
  } else {
    // As many positions at a time as a chunk of the batch holds, within kMixedBatchBytes.
    const Group mixed{group.first, group.end, batched_a ? 0 : group.slots_a, batched_b ? 0 : group.slots_b};
    read_positions(mixed, 0, batched_end, std::min(chunk_bytes, kMixedBatchBytes), batch_index);
  }
  if (split <= last_position_) read_positions(group, split, last_position_, batch_bytes_, batch_index);
}

// The group's positions lo..hi in batches of about batch_bytes: the positions of its first
// pair's expected tap (only positions both traces hold are compared).
void PairReader::read_positions(const Group& group, std::int64_t lo_position, std::int64_t hi_position,
                                std::int64_t batch_bytes, std::size_t& batch_index) {
  const TapInfo& a0 = *pairs_[group.first].first;
  const TapInfo& b0 = *pairs_[group.first].second;
  const auto n_pairs = std::int64_t(group.end - group.first);
  // A position's floats in each trace, as read: every slot's stored row (a stack), or each pair's
  // row as aligned (read_into), a pair's rows after the previous pair's.
  const std::int64_t a_floats = group.slots_a > 0 ? group.slots_a * a0.stored_size : n_pairs * a0.row_size;
  const std::int64_t b_floats = group.slots_b > 0 ? group.slots_b * b0.stored_size : n_pairs * b0.row_size;
  const std::int64_t position_bytes = (a_floats + b_floats) * std::int64_t(sizeof(float));
  const auto per_batch = std::size_t(std::max<std::int64_t>(1, batch_bytes / position_bytes));
  const std::vector<std::int64_t> positions = a_.positions_in(a0, lo_position, hi_position);
  for (std::size_t i0 = 0; i0 < positions.size(); i0 += per_batch, ++batch_index) {
    if (!wait_for_room(batch_index)) return;
    const std::int64_t lo = positions[i0], hi = positions[std::min(i0 + per_batch, positions.size()) - 1];
    Batch& batch = batches_[batch_index % kBatchesAhead];
    batch.rows.resize(group.end - group.first);
    for (std::size_t k = group.first; k < group.end; ++k) {
      PairRows& rows = batch.rows[k - group.first];
      rows.pair = k;
      rows.positions_a = a_.positions_in(*pairs_[k].first, lo, hi);
      rows.positions_b = b_.positions_in(*pairs_[k].second, lo, hi);
    }
    // Every pair of a group holds its first pair's rows (same runs).
    const std::size_t rows_a = batch.rows[0].positions_a.size(), rows_b = batch.rows[0].positions_b.size();
    float* const a = batch.memory.reserve(rows_a * std::size_t(a_floats) + rows_b * std::size_t(b_floats));
    float* const b = a + rows_a * std::size_t(a_floats);
    if (group.slots_a > 0) a_.read_stack_into(a0, lo, hi, a);
    if (group.slots_b > 0) b_.read_stack_into(b0, lo, hi, b);
    for (std::size_t k = group.first; k < group.end; ++k) {
      PairRows& rows = batch.rows[k - group.first];
      const TapInfo& ta = *pairs_[k].first;
      const TapInfo& tb = *pairs_[k].second;
      // The pair's rows in one trace's memory: its slot of the stack read, or read here.
      const auto place = [&, j = k - group.first](const TraceReader& r, const TapInfo& t, bool stacked,
                                                   float* memory, std::size_t n_rows, std::int64_t floats,
                                                   const float*& at, std::size_t& stride) {
        if (stacked) {
          at = memory + t.slot * std::size_t(t.stored_size);
          stride = std::size_t(floats);
          return;
        }
        float* const own = memory + j * n_rows * std::size_t(t.row_size);
        r.read_into(t, lo, hi, own);
        at = own;
        stride = std::size_t(t.row_size);
      };
      place(a_, ta, group.slots_a > 0, a, rows_a, a_floats, rows.a, rows.stride_a);
      place(b_, tb, group.slots_b > 0, b, rows_b, b_floats, rows.b, rows.stride_b);
      rows.row_size = ta.row_size;
      if (ta.sharded() && !tb.sharded()) {
        rows.b = keep_shard(rows.b, rows_b, tb.row_size, ta, rows.kept);
        rows.stride_b = std::size_t(ta.row_size);
      } else if (tb.sharded() && !ta.sharded()) {
        rows.a = keep_shard(rows.a, rows_a, ta.row_size, tb, rows.kept);
        rows.stride_a = std::size_t(tb.row_size);
        rows.row_size = tb.row_size;
      }
    }
    publish();
  }
}

void PairReader::read_all() {
  try {
    std::size_t batch_index = 0;
    for (std::size_t first = 0; first < pairs_.size();) {
      const Group group = group_at(first);
      read_group(group, batch_index);
      first = group.end;
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  changed_.notify_all();
}

const PairRows* PairReader::next() {
  if (started_ && ++in_batch_ == batches_[batch_ % kBatchesAhead].rows.size()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      consumed_ = ++batch_;
    }
    changed_.notify_all();
    in_batch_ = 0;
  }
  started_ = true;
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return batch_ < read_ || done_; });
  if (batch_ < read_) return &batches_[batch_ % kBatchesAhead].rows[in_batch_];
  if (error_) std::rethrow_exception(error_);
  return nullptr;
}

}  // namespace tapdiff::diff
