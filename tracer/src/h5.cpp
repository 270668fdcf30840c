#include "h5.hpp"

#include <mutex>
#include <vector>

#include "tapdiff/trace_error.hpp"

namespace tapdiff::h5 {

void init_library() {
  static std::once_flag once;
  std::call_once(once, [] {
    H5dont_atexit();  // must precede the library's initialisation to have an effect
    H5open();
  });
  // Errors are reported by TraceError, not printed. A thread-safe HDF5 (Debian's) keeps this
  // setting per thread: every thread that calls it through the tracer (diff reads on one of
  // its own) turns the printing off once.
  thread_local const bool quiet = H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr) >= 0;
  (void)quiet;
}

namespace {

herr_t collect(unsigned /*n*/, const H5E_error2_t* entry, void* data) {
  auto* lines = static_cast<std::vector<std::string>*>(data);
  if (entry->desc != nullptr && entry->desc[0] != '\0') lines->emplace_back(entry->desc);
  return 0;
}

}  // namespace

std::string take_error_stack() {
  std::vector<std::string> lines;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect, &lines);
  H5Eclear2(H5E_DEFAULT);
  if (lines.empty()) return {};
  if (lines.size() == 1) return lines.front();
  return lines.front() + "; " + lines.back();
}

Id& Id::operator=(Id&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.id_;
    closer_ = other.closer_;
    other.id_ = H5I_INVALID_HID;
  }
  return *this;
}

bool Id::close() {
  if (id_ < 0) return true;
  const herr_t status = closer_(id_);
  id_ = H5I_INVALID_HID;
  return status >= 0;
}

void Id::reset() noexcept {
  if (id_ >= 0) {
    closer_(id_);
    H5Eclear2(H5E_DEFAULT);
    id_ = H5I_INVALID_HID;
  }
}

void fail(const Where& where, const std::string& what) {
  const std::string stack = take_error_stack();
  throw TraceError(where.file, where.object,
                   stack.empty() ? what : what + " (HDF5: " + stack + ")");
}

hid_t check_id(hid_t id, const Where& where, const std::string& what) {
  if (id < 0) fail(where, what);
  return id;
}

void check(herr_t status, const Where& where, const std::string& what) {
  if (status < 0) fail(where, what);
}

Id file_id(hid_t id, const Where& w, const std::string& what) {
  return Id(check_id(id, w, what), H5Fclose);
}
Id group_id(hid_t id, const Where& w, const std::string& what) {
  return Id(check_id(id, w, what), H5Gclose);
}
Id dataset_id(hid_t id, const Where& w, const std::string& what) {
  return Id(check_id(id, w, what), H5Dclose);
}
Id space_id(hid_t id, const Where& w, const std::string& what) {
  return Id(check_id(id, w, what), H5Sclose);
}
Id type_id(hid_t id, const Where& w, const std::string& what) {
  return Id(check_id(id, w, what), H5Tclose);
}
Id plist_id(hid_t id, const Where& w, const std::string& what) {
  return Id(check_id(id, w, what), H5Pclose);
}
Id attr_id(hid_t id, const Where& w, const std::string& what) {
  return Id(check_id(id, w, what), H5Aclose);
}

bool link_exists(hid_t location, const char* name) {
  const htri_t exists = H5Lexists(location, name, H5P_DEFAULT);
  if (exists < 0) H5Eclear2(H5E_DEFAULT);
  return exists > 0;
}

}  // namespace tapdiff::h5
