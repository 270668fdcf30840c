// Attributes: scalar strings (variable-length UTF-8 when written; fixed or variable length
// when read, as h5py may write either), int64, float64 and 1-D int64 arrays. Readers throw
// TraceError naming the attribute and the type they expected.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "h5.hpp"

namespace tapdiff::h5 {

enum class AttrKind { integer, floating, string, other };

bool has_attr(hid_t object, const char* name);
std::vector<std::string> attr_names(hid_t object, const Where& where);
AttrKind attr_kind(hid_t object, const char* name, const Where& where);

// Writers create the attribute: it must not exist yet (objects are written once).
void write_string_attr(hid_t object, const char* name, std::string_view value, const Where& where);
void write_int_attr(hid_t object, const char* name, std::int64_t value, const Where& where);
void write_float_attr(hid_t object, const char* name, double value, const Where& where);
void write_int_array_attr(hid_t object, const char* name, const std::vector<std::int64_t>& values,
                          const Where& where);

// Replaces (or creates) a 1-D int64 attribute whose length may change.
void rewrite_int_array_attr(hid_t object, const char* name,
                            const std::vector<std::int64_t>& values, const Where& where);

// An int64 scalar attribute kept open for rewriting (committed counts, complete).
Id create_int_attr(hid_t object, const char* name, std::int64_t value, const Where& where);
void rewrite_int_attr(const Id& attr, std::int64_t value, const Where& where, const char* name);

std::string read_string_attr(hid_t object, const char* name, const Where& where);
std::int64_t read_int_attr(hid_t object, const char* name, const Where& where);
double read_float_attr(hid_t object, const char* name, const Where& where);
std::vector<std::int64_t> read_int_array_attr(hid_t object, const char* name, const Where& where);

}  // namespace tapdiff::h5
