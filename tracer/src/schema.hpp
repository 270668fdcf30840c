// Names of every object and attribute in a trace file (docs/trace-schema.md is the authority;
// python/tapdiff_trace.py repeats them).
#pragma once

#include <cstddef>

namespace tapdiff::schema {

// Root attributes.
inline constexpr const char* kFormat = "format";
inline constexpr const char* kFormatVersion = "format_version";
inline constexpr const char* kProducer = "producer";
inline constexpr const char* kProducerVersion = "producer_version";
inline constexpr const char* kGitCommit = "git_commit";
inline constexpr const char* kModelPath = "model_path";
inline constexpr const char* kModelSha256 = "model_sha256";
inline constexpr const char* kPrecision = "precision";
inline constexpr const char* kFault = "fault";
inline constexpr const char* kPromptLength = "prompt_length";
inline constexpr const char* kComplete = "complete";
inline constexpr const char* kCommittedSteps = "committed_steps";
inline constexpr const char* kCommittedTokens = "committed_tokens";
inline constexpr const char* kFilterNames = "tap_filter_names";          // optional
inline constexpr const char* kFilterLayers = "tap_filter_layers";        // optional
inline constexpr const char* kFilterPositions = "tap_filter_positions";  // optional
inline constexpr const char* kLockstepSource = "lockstep_source";        // optional

// Groups and datasets.
inline constexpr const char* kHparams = "hparams";      // group, one attribute per key
inline constexpr const char* kDims = "dims";            // optional group of int64 attributes
inline constexpr const char* kProducerSettings = "producer_settings";  // optional group (2.1)
inline constexpr const char* kUnavailable = "unavailable";  // optional group of strings (2.1)
inline constexpr const char* kLayouts = "layouts";  // optional group of strings (2.2)
inline constexpr const char* kTokens = "tokens";        // int32 (n,)
// int64 (n_taps, 3): rows, runs, rows in the stack's batch (format 3; 2.x has the first two)
inline constexpr const char* kCommitted = "committed";
inline constexpr std::size_t kCommittedWidth = 3;
inline constexpr const char* kTaps = "taps";            // group of tap groups

// Inside /taps/<stack>: the taps of one name and row shape, one slot per layer.
inline constexpr const char* kTapName = "name";
inline constexpr const char* kTapRowShape = "row_shape";
inline constexpr const char* kTapLayers = "layers";  // int64 (n_slots,)
inline constexpr const char* kTapIndex = "index";    // int64 (n_slots,): rows of /committed
inline constexpr const char* kTapData = "data";      // float32 (rows, n_slots, *row_shape)
inline constexpr const char* kTapBatch = "batch";    // float32 (n_slots, rows, *row_shape)
inline constexpr const char* kTapRuns = "runs";  // int64 (n_runs, n_slots, 2): first_row, position
inline constexpr char kStackSuffix = '#';        // "<name>#2": a further row shape of a name

// Chunking of the bookkeeping datasets (rows of each).
inline constexpr std::size_t kTokensChunk = 1024;
inline constexpr std::size_t kCommittedChunk = 256;

}  // namespace tapdiff::schema
