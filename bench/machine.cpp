#include "machine.hpp"

#include <fmt/format.h>
#include <fstream>
#include <thread>
#include <unistd.h>

namespace tapdiff::bench {
namespace {

std::string first_value(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) {
      auto pos = line.find_first_of(":=", key.size());
      if (pos == std::string::npos) continue;
      std::string v = line.substr(pos + 1);
      v.erase(0, v.find_first_not_of(" \t\""));
      while (!v.empty() && (v.back() == '"' || v.back() == ' ')) v.pop_back();
      return v;
    }
  return "unknown";
}

}  // namespace

std::string machine_description() {
  const double mem_gib = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE)) / (1 << 30);
  return fmt::format("{}, {} cores, {:.1f} GiB, {}, g++ {}.{}.{}",
                     first_value("/proc/cpuinfo", "model name"), std::thread::hardware_concurrency(),
                     mem_gib, first_value("/etc/os-release", "PRETTY_NAME"), __GNUC__,
                     __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return fmt::format("{} {} {}", a, b, c);
}

}  // namespace tapdiff::bench
