// Prints a trace as JSON (tapdiff::trace_summary), with --values also every tap's positions
// and values. Used by the Python interop tests to check what the C++ reader sees. Exit 2 and
// the message on stderr for a TraceError.
#include <iostream>
#include <string>

#include "tapdiff/trace_reader.hpp"
#include "tapdiff/trace_summary.hpp"

int main(int argc, char** argv) {
  const bool values = argc == 3 && std::string(argv[1]) == "--values";
  if (argc != 2 && !values) {
    std::cerr << "usage: trace_test_dump [--values] TRACE\n";
    return 64;
  }
  try {
    const tapdiff::TraceReader trace(argv[argc - 1]);
    nlohmann::json out = tapdiff::trace_summary(trace);
    if (values) {
      nlohmann::json all = nlohmann::json::object();
      for (const tapdiff::TapInfo& tap : trace.taps()) {
        const tapdiff::TapRows rows = trace.read(tap);
        all[tap.full_name] = {{"positions", rows.positions}, {"values", rows.values}};
      }
      out["values"] = all;
    }
    std::cout << out.dump() << "\n";
    return 0;
  } catch (const tapdiff::TraceError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
}
