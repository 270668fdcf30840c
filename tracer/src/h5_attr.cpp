#include "h5_attr.hpp"

#include <cstring>

#include "tapdiff/trace_error.hpp"

namespace tapdiff::h5 {
namespace {

std::string quoted(const char* name) { return std::string("attribute '") + name + "'"; }

[[noreturn]] void bad(const Where& where, const char* name, const std::string& problem) {
  H5Eclear2(H5E_DEFAULT);
  throw TraceError(where.file, where.object, quoted(name) + ": " + problem);
}

Id open_attr(hid_t object, const char* name, const Where& where) {
  if (!has_attr(object, name)) bad(where, name, "missing");
  return attr_id(H5Aopen(object, name, H5P_DEFAULT), where, "cannot open " + quoted(name));
}

std::string kind_name(H5T_class_t cls) {
  switch (cls) {
    case H5T_INTEGER:
      return "an integer";
    case H5T_FLOAT:
      return "a float";
    case H5T_STRING:
      return "a string";
    case H5T_ENUM:
      return "an enum (a boolean?)";
    case H5T_COMPOUND:
      return "a compound";
    case H5T_ARRAY:
      return "an array type";
    default:
      return "another type";
  }
}

// Number of elements; a scalar counts as 1.
hssize_t element_count(const Id& attr, const Where& where, const char* name) {
  const Id space = space_id(H5Aget_space(attr.get()), where, "cannot read " + quoted(name));
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) fail(where, "cannot read " + quoted(name));
  return n;
}

H5T_class_t class_of(const Id& attr, const Where& where, const char* name) {
  const Id type = type_id(H5Aget_type(attr.get()), where, "cannot read " + quoted(name));
  return H5Tget_class(type.get());
}

void require_one(const Id& attr, const Where& where, const char* name, const char* expected) {
  const hssize_t n = element_count(attr, where, name);
  if (n != 1)
    bad(where, name,
        std::string("expected ") + expected + ", got " + std::to_string(n) + " values");
}

Id scalar_space(const Where& where) {
  return space_id(H5Screate(H5S_SCALAR), where, "cannot create a dataspace");
}

void write_scalar(hid_t object, const char* name, hid_t file_type, hid_t mem_type,
                  const void* value, const Where& where) {
  const Id space = scalar_space(where);
  const Id attr =
      attr_id(H5Acreate2(object, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), where,
              "cannot create " + quoted(name));
  check(H5Awrite(attr.get(), mem_type, value), where, "cannot write " + quoted(name));
}

}  // namespace

bool has_attr(hid_t object, const char* name) {
  const htri_t exists = H5Aexists(object, name);
  if (exists < 0) H5Eclear2(H5E_DEFAULT);
  return exists > 0;
}

std::vector<std::string> attr_names(hid_t object, const Where& where) {
  std::vector<std::string> names;
  auto visit = [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    return 0;
  };
  hsize_t index = 0;
  check(H5Aiterate2(object, H5_INDEX_NAME, H5_ITER_INC, &index, visit, &names), where,
        "cannot list attributes");
  return names;
}

AttrKind attr_kind(hid_t object, const char* name, const Where& where) {
  const Id attr = open_attr(object, name, where);
  switch (class_of(attr, where, name)) {
    case H5T_INTEGER:
      return AttrKind::integer;
    case H5T_FLOAT:
      return AttrKind::floating;
    case H5T_STRING:
      return AttrKind::string;
    default:
      return AttrKind::other;
  }
}

void write_string_attr(hid_t object, const char* name, std::string_view value, const Where& where) {
  const Id type = type_id(H5Tcopy(H5T_C_S1), where, "cannot create a string type");
  check(H5Tset_size(type.get(), H5T_VARIABLE), where, "cannot create a string type");
  check(H5Tset_cset(type.get(), H5T_CSET_UTF8), where, "cannot create a string type");
  const std::string copy(value);
  const char* text = copy.c_str();
  write_scalar(object, name, type.get(), type.get(), &text, where);
}

void write_int_attr(hid_t object, const char* name, std::int64_t value, const Where& where) {
  write_scalar(object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value, where);
}

void write_float_attr(hid_t object, const char* name, double value, const Where& where) {
  write_scalar(object, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value, where);
}

void rewrite_int_array_attr(hid_t object, const char* name,
                            const std::vector<std::int64_t>& values, const Where& where) {
  if (has_attr(object, name)) {
    check(H5Adelete(object, name), where, "cannot replace " + quoted(name));
  }
  write_int_array_attr(object, name, values, where);
}

void write_int_array_attr(hid_t object, const char* name, const std::vector<std::int64_t>& values,
                          const Where& where) {
  const hsize_t n = values.size();
  const Id space = space_id(H5Screate_simple(1, &n, nullptr), where, "cannot create a dataspace");
  const Id attr =
      attr_id(H5Acreate2(object, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), where,
              "cannot create " + quoted(name));
  check(H5Awrite(attr.get(), H5T_NATIVE_INT64, values.data()), where,
        "cannot write " + quoted(name));
}

Id create_int_attr(hid_t object, const char* name, std::int64_t value, const Where& where) {
  const Id space = scalar_space(where);
  Id attr = attr_id(H5Acreate2(object, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                    where, "cannot create " + quoted(name));
  check(H5Awrite(attr.get(), H5T_NATIVE_INT64, &value), where, "cannot write " + quoted(name));
  return attr;
}

void rewrite_int_attr(const Id& attr, std::int64_t value, const Where& where, const char* name) {
  check(H5Awrite(attr.get(), H5T_NATIVE_INT64, &value), where, "cannot write " + quoted(name));
}

std::string read_string_attr(hid_t object, const char* name, const Where& where) {
  const Id attr = open_attr(object, name, where);
  const Id type = type_id(H5Aget_type(attr.get()), where, "cannot read " + quoted(name));
  if (H5Tget_class(type.get()) != H5T_STRING) {
    bad(where, name, "expected a string, got " + kind_name(H5Tget_class(type.get())));
  }
  require_one(attr, where, name, "one string");
  const htri_t variable = H5Tis_variable_str(type.get());
  if (variable < 0) fail(where, "cannot read " + quoted(name));
  if (variable > 0) {
    const Id mem = type_id(H5Tcopy(H5T_C_S1), where, "cannot create a string type");
    check(H5Tset_size(mem.get(), H5T_VARIABLE), where, "cannot create a string type");
    check(H5Tset_cset(mem.get(), H5Tget_cset(type.get())), where, "cannot create a string type");
    char* text = nullptr;
    check(H5Aread(attr.get(), mem.get(), &text), where, "cannot read " + quoted(name));
    std::string value = text != nullptr ? text : "";
    H5free_memory(text);
    return value;
  }
  const std::size_t size = H5Tget_size(type.get());
  std::string value(size, '\0');
  check(H5Aread(attr.get(), type.get(), value.data()), where, "cannot read " + quoted(name));
  value.resize(std::strlen(value.c_str()));
  if (H5Tget_strpad(type.get()) == H5T_STR_SPACEPAD) {
    while (!value.empty() && value.back() == ' ') value.pop_back();
  }
  return value;
}

std::int64_t read_int_attr(hid_t object, const char* name, const Where& where) {
  const Id attr = open_attr(object, name, where);
  const H5T_class_t cls = class_of(attr, where, name);
  if (cls != H5T_INTEGER) bad(where, name, "expected an integer, got " + kind_name(cls));
  require_one(attr, where, name, "one integer");
  std::int64_t value = 0;
  check(H5Aread(attr.get(), H5T_NATIVE_INT64, &value), where, "cannot read " + quoted(name));
  return value;
}

double read_float_attr(hid_t object, const char* name, const Where& where) {
  const Id attr = open_attr(object, name, where);
  const H5T_class_t cls = class_of(attr, where, name);
  if (cls != H5T_FLOAT) bad(where, name, "expected a float, got " + kind_name(cls));
  require_one(attr, where, name, "one float");
  double value = 0;
  check(H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &value), where, "cannot read " + quoted(name));
  return value;
}

std::vector<std::int64_t> read_int_array_attr(hid_t object, const char* name, const Where& where) {
  const Id attr = open_attr(object, name, where);
  const H5T_class_t cls = class_of(attr, where, name);
  if (cls != H5T_INTEGER) bad(where, name, "expected integers, got " + kind_name(cls));
  const Id space = space_id(H5Aget_space(attr.get()), where, "cannot read " + quoted(name));
  if (H5Sget_simple_extent_ndims(space.get()) != 1) {
    bad(where, name, "expected a 1-D integer array");
  }
  std::vector<std::int64_t> values(static_cast<std::size_t>(element_count(attr, where, name)));
  if (!values.empty()) {
    check(H5Aread(attr.get(), H5T_NATIVE_INT64, values.data()), where,
          "cannot read " + quoted(name));
  }
  return values;
}

}  // namespace tapdiff::h5
