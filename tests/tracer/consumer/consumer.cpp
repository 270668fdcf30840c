// Writes and reads back a one-tap trace through the installed C++ headers.
#include <iostream>

#include "tapdiff/trace_reader.hpp"
#include "tapdiff/trace_summary.hpp"
#include "tapdiff/trace_writer.hpp"

int main(int argc, char** argv) {
  if (argc != 2) return 64;
  try {
    {
      tapdiff::TraceWriter w(argv[1], tapdiff::TraceMetadata{});
      const float row[3] = {1.0f, 2.0f, 3.0f};
      w.record("attn_q", 0, 0, 1, {3}, row);
      w.end_step();
      w.close();
    }
    const tapdiff::TraceReader r(argv[1]);
    const tapdiff::TapRows rows = r.read(r.tap("attn_q", 0));
    std::cout << tapdiff::trace_summary(r)["taps"].dump() << "\n";
    return r.complete() && rows.values.size() == 3 && rows.values[2] == 3.0f ? 0 : 1;
  } catch (const tapdiff::TraceError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
}
