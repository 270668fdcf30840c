// `tapdiff fixture`: write a deterministic tiny GGUF model.
#include <fmt/format.h>
#include <map>
#include <stdexcept>

#include "app/commands.hpp"
#include "fixtures/tiny_model.hpp"

namespace tapdiff {
namespace {

GgmlType parse_type(const std::string& name, const std::string& option) {
  if (auto t = ggml_type_from_name(name)) return *t;
  std::string known;
  for (const auto& t : kGgmlTypes) known += (known.empty() ? "" : ", ") + std::string(t.name);
  throw std::invalid_argument(
      fmt::format("{}: unknown tensor type \"{}\" (expected one of {})", option, name, known));
}

}  // namespace

void add_fixture_command(CLI::App& app, SetExit set_exit) {
  auto* cmd = app.add_subcommand("fixture", "Generate a tiny deterministic GGUF model");
  struct Options {
    FixtureSpec spec;
    std::string arch = "llama";
    std::string type = "F32";
    std::string rope_scaling = "none";
    std::vector<std::string> overrides;
    std::string output;
  };
  auto opt = std::make_shared<Options>();
  cmd->add_option("--arch", opt->arch,
                  "Architecture: " + supported_arch_names() + ", or llama3 (a llama GGUF with Llama 3.1's rope_freqs)")
      ->check([](const std::string& name) {
        return find_arch(name) || name == "llama3" ? std::string()
                                                   : "expected one of " + supported_arch_names() + ", llama3";
      })
      ->capture_default_str();
  cmd->add_option("--n-layer", opt->spec.n_layer, "Layers")->capture_default_str();
  cmd->add_option("--n-embd", opt->spec.n_embd, "Embedding width")->capture_default_str();
  cmd->add_option("--n-head", opt->spec.n_head, "Query heads")->capture_default_str();
  cmd->add_option("--n-head-kv", opt->spec.n_head_kv, "Key/value heads")->capture_default_str();
  cmd->add_option("--n-ff", opt->spec.n_ff, "Feed-forward width")->capture_default_str();
  cmd->add_option("--n-expert", opt->spec.n_expert,
                  "Experts per layer, a mixture of experts of --n-ff wide SwiGLU FFNs (default: qwen3moe and "
                  "granitemoe 8, otherwise 0: a dense FFN)");
  cmd->add_option("--n-expert-used", opt->spec.n_expert_used, "Experts each token is routed to (default: 2)");
  cmd->add_option("--n-vocab", opt->spec.n_vocab, "Vocabulary size")->capture_default_str();
  cmd->add_option("--n-ctx", opt->spec.n_ctx_train, "Training context length")
      ->capture_default_str();
  cmd->add_option("--head-dim", opt->spec.head_dim,
                  "Head width, written as attention.key_length (default: n_embd / n_head)");
  cmd->add_option("--rope-dim", opt->spec.n_rot,
                  "Dimensions of each head RoPE rotates, written as rope.dimension_count (default: all; "
                  "Phi-4-mini rotates 96 of 128)");
  cmd->add_option("--rope-base", opt->spec.rope_freq_base,
                  "RoPE frequency base (default: llama 1e4, llama3 5e5, qwen2 and qwen3 1e6)");
  cmd->add_option("--rope-base-swa", opt->spec.rope_freq_base_swa,
                  "gemma2, gemma3: the sliding layers' RoPE base, written as rope.freq_base_swa (default: no key; "
                  "Gemma 2 rotates them at the model's base, Gemma 3 at 1e4)");
  cmd->add_option("--rope-scaling", opt->rope_scaling,
                  "RoPE scaling: linear (by 8, as Gemma 3 4B+: its global layers), yarn (by 4 with an original "
                  "context of --n-ctx / 4, as Qwen3's 128k GGUFs) or longrope (factor tensors over an original "
                  "context of --n-ctx / 32, as Phi-3.5)")
      ->check(CLI::IsMember({"none", "linear", "yarn", "longrope"}));
  cmd->add_option("--rope-scaling-factor", opt->spec.rope_scaling_factor, "The RoPE scaling's factor (> 1)");
  cmd->add_flag("--tied", opt->spec.tied_output, "No output.weight: tie the head to token_embd");
  cmd->add_option("--seed", opt->spec.seed, "Random seed")->capture_default_str();
  cmd->add_option("--type", opt->type,
                  "Type of every matrix (F32, F16, BF16, Q8_0, ...; the K-quants Q4_K, Q5_K, Q6_K need rows of a "
                  "multiple of 256: --n-embd, --n-ff and n_head · head_dim)")
      ->capture_default_str();
  cmd->add_option("--tensor-type", opt->overrides,
                  "Per-tensor type, GLOB=TYPE, e.g. 'blk.*.ffn_down.weight=Q4_0' (repeatable)");
  cmd->add_option("-o,--output", opt->output, "Output .gguf path")->required();

  cmd->callback([opt, set_exit] {
    FixtureSpec spec = opt->spec;
    spec.llama3 = opt->arch == "llama3";
    spec.arch = spec.llama3 ? Arch::llama : find_arch(opt->arch)->arch;
    spec.weight_type = parse_type(opt->type, "--type");
    spec.rope_scaling = opt->rope_scaling == "yarn"       ? RopeScalingType::yarn
                        : opt->rope_scaling == "linear"   ? RopeScalingType::linear
                        : opt->rope_scaling == "longrope" ? RopeScalingType::longrope
                                                          : RopeScalingType::none;
    if (spec.rope_scaling_factor != 0 && spec.rope_scaling == RopeScalingType::none)
      throw std::invalid_argument("--rope-scaling-factor: expected only with --rope-scaling linear, yarn or longrope");
    for (const auto& o : opt->overrides) {
      const auto eq = o.rfind('=');
      if (eq == std::string::npos || eq == 0)
        throw std::invalid_argument(
            fmt::format("--tensor-type: expected GLOB=TYPE, got \"{}\"", o));
      spec.type_overrides.emplace_back(o.substr(0, eq), parse_type(o.substr(eq + 1), "--tensor-type"));
    }
    write_fixture(spec, opt->output);
    fmt::print("wrote {}\n", opt->output);
    set_exit(0);
  });
}

}  // namespace tapdiff
