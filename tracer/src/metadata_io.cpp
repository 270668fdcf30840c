#include "metadata_io.hpp"

#include "h5_attr.hpp"
#include "schema.hpp"
#include "tapdiff/trace_error.hpp"

namespace tapdiff {
namespace {

namespace sc = schema;

struct DimField {
  const char* name;
  std::int64_t TapDims::*member;
};
constexpr DimField kDimFields[] = {
    {"n_layer", &TapDims::n_layer},   {"n_embd", &TapDims::n_embd},
    {"n_head", &TapDims::n_head},     {"n_head_kv", &TapDims::n_head_kv},
    {"head_dim", &TapDims::head_dim}, {"n_ff", &TapDims::n_ff},
    {"n_vocab", &TapDims::n_vocab},   {"n_ctx", &TapDims::n_ctx},
};
// Written only by a model that has them (a mixture of experts); 0 where absent.
constexpr DimField kOptionalDimFields[] = {
    {"n_expert", &TapDims::n_expert},
    {"n_expert_used", &TapDims::n_expert_used},
};

void check_format(hid_t file, const h5::Where& root, FormatVersion& version) {
  const std::string format = h5::read_string_attr(file, sc::kFormat, root);
  if (format != kTraceFormatName) {
    throw TraceError(root.file, root.object,
                     "attribute 'format': expected \"" + std::string(kTraceFormatName) +
                         "\", got \"" + format + "\" (not a tapdiff trace)");
  }
  const std::string text = h5::read_string_attr(file, sc::kFormatVersion, root);
  const auto parsed = FormatVersion::parse(text);
  if (!parsed) {
    throw TraceError(root.file, root.object,
                     "attribute 'format_version': expected MAJOR.MINOR, got \"" + text + "\"");
  }
  if (parsed->major > kTraceFormatVersion.major) {
    throw TraceError(root.file, root.object,
                     "format_version " + text + " is newer than this reader supports (" +
                         std::to_string(kTraceFormatVersion.major) +
                         ".x): upgrade tapdiff to read it");
  }
  if (parsed->major < kTraceOldestMajor) {
    throw TraceError(root.file, root.object,
                     "format_version " + text + " is older than any this reader supports (" +
                         std::to_string(kTraceOldestMajor) + ".x to " +
                         std::to_string(kTraceFormatVersion.major) +
                         ".x): record the trace again with this tapdiff");
  }
  version = *parsed;
}

h5::Id open_group(hid_t file, const char* name, const std::string& path) {
  const h5::Where where{path, std::string("/") + name};
  if (!h5::link_exists(file, name)) throw TraceError(path, where.object, "missing group");
  return h5::group_id(H5Gopen2(file, name, H5P_DEFAULT), where, "cannot open (is it a group?)");
}

// A group of int64, float64 and string attributes (/hparams, /producer_settings).
HParams read_attribute_group(hid_t file, const char* name, const std::string& path) {
  const h5::Id group = open_group(file, name, path);
  const h5::Where where{path, std::string("/") + name};
  HParams hparams;
  for (const std::string& key : h5::attr_names(group.get(), where)) {
    switch (h5::attr_kind(group.get(), key.c_str(), where)) {
      case h5::AttrKind::integer:
        hparams[key] = h5::read_int_attr(group.get(), key.c_str(), where);
        break;
      case h5::AttrKind::floating:
        hparams[key] = h5::read_float_attr(group.get(), key.c_str(), where);
        break;
      case h5::AttrKind::string:
        hparams[key] = h5::read_string_attr(group.get(), key.c_str(), where);
        break;
      case h5::AttrKind::other:
        throw TraceError(path, where.object,
                         "attribute '" + key + "': expected an integer, float or string");
    }
  }
  return hparams;
}

std::optional<TapDims> read_dims(hid_t file, const std::string& path) {
  if (!h5::link_exists(file, sc::kDims)) return std::nullopt;
  const h5::Id group = open_group(file, sc::kDims, path);
  const h5::Where where{path, std::string("/") + sc::kDims};
  TapDims dims;
  for (const DimField& f : kDimFields) {
    dims.*f.member = h5::read_int_attr(group.get(), f.name, where);
  }
  for (const DimField& f : kOptionalDimFields)
    if (h5::has_attr(group.get(), f.name)) dims.*f.member = h5::read_int_attr(group.get(), f.name, where);
  return dims;
}

std::string optional_string(hid_t file, const char* name, const h5::Where& where) {
  return h5::has_attr(file, name) ? h5::read_string_attr(file, name, where) : std::string();
}

void write_attribute_group(hid_t file, const char* name, const HParams& values, const std::string& path) {
  const h5::Where where{path, std::string("/") + name};
  const h5::Id group =
      h5::group_id(H5Gcreate2(file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), where, "cannot create");
  for (const auto& [key, value] : values) {
    if (const auto* i = std::get_if<std::int64_t>(&value)) {
      h5::write_int_attr(group.get(), key.c_str(), *i, where);
    } else if (const auto* d = std::get_if<double>(&value)) {
      h5::write_float_attr(group.get(), key.c_str(), *d, where);
    } else {
      h5::write_string_attr(group.get(), key.c_str(), std::get<std::string>(value), where);
    }
  }
}

}  // namespace

void write_metadata(hid_t file, const std::string& path, const TraceMetadata& m,
                    const TapFilterSpec& filter) {
  const h5::Where root{path, "/"};
  h5::write_string_attr(file, sc::kFormat, kTraceFormatName, root);
  h5::write_string_attr(file, sc::kFormatVersion, kTraceFormatVersion.to_string(), root);
  h5::write_string_attr(file, sc::kProducer, producer_name(m.producer), root);
  h5::write_string_attr(file, sc::kProducerVersion, m.producer_version, root);
  h5::write_string_attr(file, sc::kGitCommit, m.git_commit, root);
  h5::write_string_attr(file, sc::kModelPath, m.model_path, root);
  h5::write_string_attr(file, sc::kModelSha256, m.model_sha256, root);
  h5::write_string_attr(file, sc::kPrecision, m.precision, root);
  h5::write_string_attr(file, sc::kFault, m.fault, root);
  h5::write_int_attr(file, sc::kPromptLength, m.prompt_length, root);
  h5::write_string_attr(file, sc::kFilterNames, filter.names, root);
  h5::write_string_attr(file, sc::kFilterLayers, filter.layers, root);
  h5::write_string_attr(file, sc::kFilterPositions, filter.positions, root);
  if (!m.lockstep_source.empty())
    h5::write_string_attr(file, sc::kLockstepSource, m.lockstep_source, root);

  write_attribute_group(file, sc::kHparams, m.hparams, path);
  if (!m.settings.empty()) write_attribute_group(file, sc::kProducerSettings, m.settings, path);
  if (!m.unavailable.empty()) {
    HParams reasons;
    for (const auto& [tap, why] : m.unavailable) reasons[tap] = why;
    write_attribute_group(file, sc::kUnavailable, reasons, path);
  }
  if (!m.layouts.empty()) {
    HParams layouts;
    for (const auto& [tap, layout] : m.layouts) layouts[tap] = layout.to_string();
    write_attribute_group(file, sc::kLayouts, layouts, path);
  }
  if (m.dims) {
    const h5::Where dw{path, std::string("/") + sc::kDims};
    const h5::Id dims = h5::group_id(
        H5Gcreate2(file, sc::kDims, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), dw, "cannot create");
    for (const DimField& f : kDimFields)
      h5::write_int_attr(dims.get(), f.name, (*m.dims).*f.member, dw);
    for (const DimField& f : kOptionalDimFields)
      if ((*m.dims).*f.member > 0) h5::write_int_attr(dims.get(), f.name, (*m.dims).*f.member, dw);
  }
}

RootState read_root(hid_t file, const std::string& path) {
  const h5::Where root{path, "/"};
  RootState state;
  check_format(file, root, state.version);

  TraceMetadata& m = state.metadata;
  const std::string producer = h5::read_string_attr(file, sc::kProducer, root);
  const auto parsed = parse_producer(producer);
  if (!parsed) {
    throw TraceError(path, "/",
                     "attribute 'producer': expected reference, engine-host, engine-cuda, "
                     "external, llama.cpp or transformers, got \"" +
                         producer + "\"");
  }
  m.producer = *parsed;
  m.producer_version = h5::read_string_attr(file, sc::kProducerVersion, root);
  m.git_commit = h5::read_string_attr(file, sc::kGitCommit, root);
  m.model_path = h5::read_string_attr(file, sc::kModelPath, root);
  m.model_sha256 = h5::read_string_attr(file, sc::kModelSha256, root);
  m.precision = h5::read_string_attr(file, sc::kPrecision, root);
  m.fault = h5::read_string_attr(file, sc::kFault, root);
  m.prompt_length = h5::read_int_attr(file, sc::kPromptLength, root);
  if (m.prompt_length < 0) {
    throw TraceError(
        path, "/",
        "attribute 'prompt_length': expected >= 0, got " + std::to_string(m.prompt_length));
  }
  state.complete = h5::read_int_attr(file, sc::kComplete, root) != 0;
  state.committed_steps = h5::read_int_attr(file, sc::kCommittedSteps, root);
  state.committed_tokens = h5::read_int_attr(file, sc::kCommittedTokens, root);
  if (state.committed_steps < 0 || state.committed_tokens < 0) {
    throw TraceError(path, "/", "committed_steps and committed_tokens must be >= 0");
  }
  state.filter = {optional_string(file, sc::kFilterNames, root),
                  optional_string(file, sc::kFilterLayers, root),
                  optional_string(file, sc::kFilterPositions, root)};
  m.lockstep_source = optional_string(file, sc::kLockstepSource, root);
  m.hparams = read_attribute_group(file, sc::kHparams, path);
  if (h5::link_exists(file, sc::kProducerSettings))
    m.settings = read_attribute_group(file, sc::kProducerSettings, path);
  if (h5::link_exists(file, sc::kUnavailable))
    for (const auto& [tap, why] : read_attribute_group(file, sc::kUnavailable, path)) {
      const auto* text = std::get_if<std::string>(&why);
      if (text == nullptr)
        throw TraceError(path, std::string("/") + sc::kUnavailable,
                         "attribute '" + tap + "': expected a string saying why the tap is not available");
      m.unavailable[tap] = *text;
    }
  if (h5::link_exists(file, sc::kLayouts))
    for (const auto& [tap, value] : read_attribute_group(file, sc::kLayouts, path)) {
      const std::string where = std::string("/") + sc::kLayouts;
      const auto* text = std::get_if<std::string>(&value);
      if (text == nullptr)
        throw TraceError(path, where, "attribute '" + tap + "': expected a layout string such as \"axes=head_dim,n_head\"");
      try {
        m.layouts[tap] = TapLayout::parse(*text);
      } catch (const std::invalid_argument& e) {
        throw TraceError(path, where, "attribute '" + tap + "': " + e.what());
      }
    }
  m.dims = read_dims(file, path);
  return state;
}

}  // namespace tapdiff
