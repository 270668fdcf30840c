// Prints the tap catalogue table that docs/taps.md carries, or with --update FILE rewrites
// the block between the markers in FILE. A test fails when the doc and the table disagree.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "tapdiff/tap_catalogue.hpp"

int main(int argc, char** argv) {
  const std::string table = tapdiff::catalogue_markdown();
  if (argc == 1) {
    std::cout << table;
    return 0;
  }
  if (argc != 3 || std::string(argv[1]) != "--update") {
    std::cerr << "usage: tapdiff_tap_docs [--update docs/taps.md]\n";
    return 2;
  }
  std::ifstream in(argv[2]);
  if (!in) {
    std::cerr << argv[2] << ": cannot open\n";
    return 2;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string doc = buffer.str();
  const std::size_t begin = doc.find(tapdiff::kCatalogueBeginMarker);
  const std::size_t end = doc.find(tapdiff::kCatalogueEndMarker);
  if (begin == std::string::npos || end == std::string::npos || end < begin) {
    std::cerr << argv[2] << ": catalogue markers not found\n";
    return 2;
  }
  const std::size_t end_line = doc.find('\n', end);
  doc.replace(begin, (end_line == std::string::npos ? doc.size() : end_line + 1) - begin, table);
  std::ofstream(argv[2]) << doc;
  return 0;
}
