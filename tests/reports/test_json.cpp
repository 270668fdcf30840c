// JSON: parses, carries the keys docs/report-json.md documents, spells non-finite numbers.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "reports/render.hpp"
#include "sample_results.hpp"

namespace tapdiff::reports {
namespace {

using nlohmann::json;

json parse(const diff::DiffResult& r) { return json::parse(render(r, Format::json)); }

std::set<std::string> keys(const json& object) {
  std::set<std::string> out;
  for (const auto& [k, v] : object.items()) out.insert(k);
  return out;
}

TEST(ReportsJson, TopLevelKeysAreTheDocumentedOnes) {
  const json j = parse(testing::diverged_result());
  EXPECT_EQ(keys(j),
            (std::set<std::string>{"schema", "schema_version", "verdict", "profile",
                                   "compared_positions", "expected", "actual", "summary",
                                   "mode", "findings", "first_divergence", "diagnosis", "roots", "logits",
                                   "taps"}));
  EXPECT_EQ(j["schema"], "tapdiff-report");
  EXPECT_EQ(j["schema_version"], 1);
}

TEST(ReportsJson, EveryKeyIsInTheSchemaDocument) {
  std::ifstream doc(TAPDIFF_SOURCE_DIR "/docs/report-json.md");
  ASSERT_TRUE(doc) << "docs/report-json.md";
  const std::string text((std::istreambuf_iterator<char>(doc)), std::istreambuf_iterator<char>());
  std::set<std::string> all;
  const std::function<void(const json&)> collect = [&](const json& j) {
    if (j.is_object())
      for (const auto& [k, v] : j.items()) {
        all.insert(k);
        collect(v);
      }
    else if (j.is_array())
      for (const auto& v : j) collect(v);
  };
  collect(parse(testing::diverged_result()));
  collect(parse(testing::lockstep_result()));
  // A key is documented as `key` or as the last part of a path: `classes[].key`, `dims.key`.
  const auto documented = [&](const std::string& k) {
    for (std::size_t at = text.find(k + "`"); at != std::string::npos;
         at = text.find(k + "`", at + 1))
      if (at > 0 && (text[at - 1] == '`' || text[at - 1] == '.')) return true;
    return false;
  };
  for (const auto& k : all) {
    if (k.find('.') != std::string::npos) continue;  // hparams keys are the model's own
    EXPECT_TRUE(documented(k)) << "undocumented key: " << k;
  }
}

TEST(ReportsJson, DivergedValues) {
  const json j = parse(testing::diverged_result());
  EXPECT_EQ(j["verdict"], "diverged");
  EXPECT_EQ(j["profile"], "f16");
  EXPECT_EQ(j["expected"]["producer"], "reference");
  EXPECT_EQ(j["actual"]["fault"], "kv-stuck-length");
  EXPECT_EQ(j["actual"]["dims"]["n_layer"], 4);
  const json& f = j["first_divergence"];
  EXPECT_EQ(f["tap"], "blk.0.attn.probs");
  EXPECT_EQ(f["layer"], 0);
  EXPECT_EQ(f["position"], 8);
  EXPECT_EQ(f["pattern"], "from");
  EXPECT_EQ(f["diverged_positions"].size(), 8u);
  EXPECT_EQ(f["metrics"]["worst_index"], 19);
  EXPECT_EQ(j["diagnosis"]["class"], "kv-cache");
  EXPECT_DOUBLE_EQ(j["diagnosis"]["residual"].get<double>(), 1.8e-15);
  EXPECT_EQ(j["diagnosis"]["runners_up"].size(), 2u);
  EXPECT_EQ(j["logits"]["first_greedy_difference"], 10);
  EXPECT_EQ(j["logits"]["kl_percentiles"][0]["percentile"], 99.9);
  EXPECT_EQ(j["logits"]["positions"][0]["top_expected"].size(), 5u);
  EXPECT_EQ(j["taps"].size(), 74u);
  EXPECT_EQ(j["summary"]["taps_diverged"], 65);
  EXPECT_EQ(j["findings"][1]["kind"], "missing-in-actual");
  const json& probs = j["taps"][9];
  EXPECT_EQ(probs["tap"], "blk.0.attn.probs");
  EXPECT_EQ(probs["class"], "attention");
  EXPECT_EQ(probs["first_diverged_position"], 8);
  EXPECT_EQ(probs["rows"].size(), 16u);
}

TEST(ReportsJson, RowsCanBeLeftOut) {
  RenderOptions options;
  options.json_rows = false;
  const json j = json::parse(render(testing::diverged_result(), Format::json, options));
  EXPECT_TRUE(j["taps"][9]["rows"].empty());
  EXPECT_EQ(j["taps"][9]["first_diverged_position"], 8);
  EXPECT_EQ(j["first_divergence"]["metrics"]["position"], 8);
}

// The taps are rendered one at a time into the report's text: it reads as one dump of the whole
// tree would lay it out, every tap, row and comma in place.
TEST(ReportsJson, TapsRenderedOneAtATimeLayOutAsOneDump) {
  const std::string text = render(testing::diverged_result(), Format::json);
  const nlohmann::ordered_json tree = nlohmann::ordered_json::parse(text);
  ASSERT_GT(tree["taps"].size(), 1u);
  ASSERT_FALSE(tree["taps"][9]["rows"].empty());
  EXPECT_EQ(text, tree.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
}

TEST(ReportsJson, AbsentPartsAreNull) {
  const json j = parse(testing::passing_result());
  EXPECT_EQ(j["verdict"], "pass");
  EXPECT_TRUE(j["first_divergence"].is_null());
  EXPECT_TRUE(j["diagnosis"].is_null());
  EXPECT_TRUE(j["logits"]["first_greedy_difference"].is_null());
  EXPECT_TRUE(j["taps"][0]["first_diverged_position"].is_null());
  const json inc = parse(testing::incompatible_result());
  EXPECT_EQ(inc["verdict"], "incompatible");
  EXPECT_TRUE(inc["logits"].is_null());
  EXPECT_TRUE(inc["taps"].empty());
}

TEST(ReportsJson, NonFiniteNumbersAreStringsAndBadUtf8IsReplaced) {
  const json j = parse(testing::hostile_result());
  EXPECT_EQ(j["first_divergence"]["metrics"]["nmse"], "nan");
  EXPECT_EQ(j["first_divergence"]["metrics"]["max_abs"], "inf");
  EXPECT_EQ(j["diagnosis"]["baseline_residual"], "inf");
  EXPECT_TRUE(j["diagnosis"]["variant"].is_null());
  EXPECT_EQ(j["logits"]["kl_mean"], "nan");
  EXPECT_EQ(j["actual"]["hparams"]["nan.param"], "nan");
  EXPECT_EQ(j["first_divergence"]["tap"], testing::kHostileTap);
  EXPECT_EQ(j["expected"]["path"], testing::kHostilePath);
  EXPECT_NE(j["actual"]["path"].get<std::string>().find("\xEF\xBF\xBD"), std::string::npos);
}

}  // namespace
}  // namespace tapdiff::reports
