// A thin RAII layer over the HDF5 C API: owned identifiers, checked calls that throw
// TraceError with the file, the object and HDF5's own reason, and library set-up.
#pragma once

#include <hdf5.h>

#include <string>
#include <string_view>

namespace tapdiff::h5 {

// Silences HDF5's error printing in the calling thread (errors become TraceError messages) and
// stops the library from cleaning up at exit: in 1.10.8 that cleanup segfaults on a file whose
// close failed, which is exactly what a full disk leaves behind. Idempotent.
void init_library();

// HDF5's error stack as one line (outermost reason, then the innermost cause); clears it.
std::string take_error_stack();

class Id {
public:
  using Closer = herr_t (*)(hid_t);

  Id() = default;
  Id(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Id() { reset(); }
  Id(Id&& other) noexcept : id_(other.id_), closer_(other.closer_) { other.id_ = H5I_INVALID_HID; }
  Id& operator=(Id&& other) noexcept;
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now; false when HDF5 reported an error (the stack is left for the caller).
  bool close();
  void reset() noexcept;

private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// Where a call happens, for messages: "<file>: <object>: <what>: <HDF5 stack>".
struct Where {
  const std::string& file;
  std::string object;
};

[[noreturn]] void fail(const Where& where, const std::string& what);  // appends the stack
hid_t check_id(hid_t id, const Where& where, const std::string& what);
void check(herr_t status, const Where& where, const std::string& what);

// Owned identifiers of each kind; throw through check_id when id < 0.
Id file_id(hid_t id, const Where& where, const std::string& what);
Id group_id(hid_t id, const Where& where, const std::string& what);
Id dataset_id(hid_t id, const Where& where, const std::string& what);
Id space_id(hid_t id, const Where& where, const std::string& what);
Id type_id(hid_t id, const Where& where, const std::string& what);
Id plist_id(hid_t id, const Where& where, const std::string& what);
Id attr_id(hid_t id, const Where& where, const std::string& what);

bool link_exists(hid_t location, const char* name);

}  // namespace tapdiff::h5
