// test_reports_write DIR: every sample result in every format, as DIR/<result>.<ext> (and the
// coloured terminal text as DIR/<result>.ansi.txt), for the XML and browser tests.
#include <fstream>
#include <iostream>

#include "reports/render.hpp"
#include "sample_results.hpp"

int main(int argc, char** argv) {
  using namespace tapdiff::reports;
  if (argc != 2) {
    std::cerr << "usage: test_reports_write DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  for (const auto& [name, result] : testing::all_results()) {
    for (Format f : {Format::text, Format::markdown, Format::json, Format::junit, Format::html}) {
      const std::string path = dir + "/" + name + "." + std::string(format_extension(f));
      std::ofstream(path, std::ios::binary) << render(result, f);
    }
    RenderOptions colour;
    colour.color = true;
    std::ofstream(dir + "/" + name + ".ansi.txt", std::ios::binary)
        << render(result, Format::text, colour);
  }
  return 0;
}
