// Malformed traces: each mutation of a valid trace must give a TraceError naming the file,
// the HDF5 object and what was expected; newer minor versions must still open.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "support/temp_dir.hpp"
#include "tapdiff/trace_reader.hpp"
#include "tapdiff/trace_writer.hpp"
#include "trace_test_util.hpp"

namespace tapdiff {
namespace {

using test::TempDir;

// A valid trace: blk.0.attn_q with 3 rows of 4 floats at positions 0..2.
void write_valid(const std::string& path) {
  TraceWriter w(path, test::sample_metadata());
  for (int p = 0; p < 3; ++p) {
    const std::vector<float> row(4, static_cast<float>(p));
    w.record("attn_q", 0, p, 1, {4}, row.data());
    w.end_step();
  }
  w.close();
}

// Plain HDF5 edits, as a buggy producer (or a hand-written h5py script) would make them.
class Edit {
public:
  explicit Edit(const std::string& path) : file_(test::open_raw(path, H5F_ACC_RDWR)) {}
  ~Edit() { H5Fclose(file_); }

  void set_string(const char* object, const char* name, const std::string& value) {
    remove_attr(object, name);
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, value.size() + 1);
    const hid_t space = H5Screate(H5S_SCALAR);
    const hid_t attr =
        H5Acreate_by_name(file_, object, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(attr, type, value.c_str());
    H5Aclose(attr);
    H5Sclose(space);
    H5Tclose(type);
  }
  void set_int(const char* object, const char* name, std::int64_t value) {
    remove_attr(object, name);
    const hid_t space = H5Screate(H5S_SCALAR);
    const hid_t attr = H5Acreate_by_name(file_, object, name, H5T_STD_I64LE, space, H5P_DEFAULT,
                                         H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(attr, H5T_NATIVE_INT64, &value);
    H5Aclose(attr);
    H5Sclose(space);
  }
  void remove_attr(const char* object, const char* name) {
    if (H5Aexists_by_name(file_, object, name, H5P_DEFAULT) > 0) {
      H5Adelete_by_name(file_, object, name, H5P_DEFAULT);
    }
  }
  void set_int_array(const char* object, const char* name, const std::vector<std::int64_t>& v) {
    remove_attr(object, name);
    const hsize_t n = v.size();
    const hid_t space = H5Screate_simple(1, &n, nullptr);
    const hid_t attr = H5Acreate_by_name(file_, object, name, H5T_STD_I64LE, space, H5P_DEFAULT,
                                         H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(attr, H5T_NATIVE_INT64, v.data());
    H5Aclose(attr);
    H5Sclose(space);
  }
  void remove_link(const char* name) { H5Ldelete(file_, name, H5P_DEFAULT); }
  void replace_dataset(const char* name, hid_t type, std::vector<hsize_t> dims) {
    remove_link(name);
    const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    const hid_t ds = H5Dcreate2(file_, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(ds);
    H5Sclose(space);
  }
  // Overwrites row `row` of an int64 (n, 2) dataset.
  void set_pair(const char* name, hsize_t row, std::int64_t a, std::int64_t b) {
    const hid_t ds = H5Dopen2(file_, name, H5P_DEFAULT);
    const hid_t space = H5Dget_space(ds);
    const hsize_t start[2] = {row, 0};
    const hsize_t count[2] = {1, 2};
    H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr);
    const hid_t mem = H5Screate_simple(2, count, nullptr);
    const std::int64_t values[2] = {a, b};
    H5Dwrite(ds, H5T_NATIVE_INT64, mem, space, H5P_DEFAULT, values);
    H5Sclose(mem);
    H5Sclose(space);
    H5Dclose(ds);
  }
  // Appends a run row to a tap's runs dataset.
  void append_run(const char* name, std::int64_t first_row, std::int64_t first_position) {
    const hid_t ds = H5Dopen2(file_, name, H5P_DEFAULT);
    hsize_t dims[2];
    const hid_t old_space = H5Dget_space(ds);
    H5Sget_simple_extent_dims(old_space, dims, nullptr);
    H5Sclose(old_space);
    const hsize_t new_dims[2] = {dims[0] + 1, 2};
    H5Dset_extent(ds, new_dims);
    H5Dclose(ds);
    set_pair(name, dims[0], first_row, first_position);
  }

private:
  hid_t file_;
};

struct Case {
  const char* what;
  std::function<void(Edit&)> edit;
  const char* object;
  const char* needle;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"wrong format name", [](Edit& e) { e.set_string("/", "format", "other-trace"); }, "/",
       "attribute 'format': expected \"tapdiff-trace\", got \"other-trace\""},
      {"missing format", [](Edit& e) { e.remove_attr("/", "format"); }, "/",
       "attribute 'format': missing"},
      {"missing format_version", [](Edit& e) { e.remove_attr("/", "format_version"); }, "/",
       "attribute 'format_version': missing"},
      {"newer major version", [](Edit& e) { e.set_string("/", "format_version", "2.0"); }, "/",
       "format_version 2.0 is newer than this reader supports (1.x)"},
      {"unparsable version", [](Edit& e) { e.set_string("/", "format_version", "one"); }, "/",
       "expected MAJOR.MINOR, got \"one\""},
      {"missing producer", [](Edit& e) { e.remove_attr("/", "producer"); }, "/",
       "attribute 'producer': missing"},
      {"unknown producer", [](Edit& e) { e.set_string("/", "producer", "gpu"); }, "/",
       "attribute 'producer': expected reference, engine-host, engine-cuda or external"},
      {"string where an integer belongs",
       [](Edit& e) { e.set_string("/", "committed_steps", "3"); }, "/",
       "attribute 'committed_steps': expected an integer, got a string"},
      {"missing complete", [](Edit& e) { e.remove_attr("/", "complete"); }, "/",
       "attribute 'complete': missing"},
      {"missing taps group", [](Edit& e) { e.remove_link("/taps"); }, "/taps", "missing group"},
      {"missing hparams group", [](Edit& e) { e.remove_link("/hparams"); }, "/hparams",
       "missing group"},
      {"missing tokens", [](Edit& e) { e.remove_link("/tokens"); }, "/tokens", "missing dataset"},
      {"tokens shorter than committed", [](Edit& e) { e.set_int("/", "committed_tokens", 50); },
       "/tokens", "committed count 50 exceeds its 2 rows"},
      {"data of the wrong rank",
       [](Edit& e) {
         e.replace_dataset("/taps/blk.0.attn_q/data", H5T_IEEE_F32LE, {3, 4, 1});
       },
       "/taps/blk.0.attn_q/data", "expected rank 2, got 3"},
      {"data of the wrong row width",
       [](Edit& e) {
         e.replace_dataset("/taps/blk.0.attn_q/data", H5T_IEEE_F32LE, {3, 5});
       },
       "/taps/blk.0.attn_q/data", "expected shape [*, 4], got [3, 5]"},
      {"data of the wrong type",
       [](Edit& e) {
         e.replace_dataset("/taps/blk.0.attn_q/data", H5T_STD_I32LE, {3, 4});
       },
       "/taps/blk.0.attn_q/data", "expected float32 elements, got integer of 4 bytes"},
      {"float64 data",
       [](Edit& e) {
         e.replace_dataset("/taps/blk.0.attn_q/data", H5T_IEEE_F64LE, {3, 4});
       },
       "/taps/blk.0.attn_q/data", "expected float32 elements, got float of 8 bytes"},
      {"fewer data rows than committed",
       [](Edit& e) {
         e.replace_dataset("/taps/blk.0.attn_q/data", H5T_IEEE_F32LE, {2, 4});
       },
       "/taps/blk.0.attn_q/data", "committed rows 3 exceed its 2 rows"},
      {"missing data", [](Edit& e) { e.remove_link("/taps/blk.0.attn_q/data"); },
       "/taps/blk.0.attn_q/data", "missing dataset"},
      {"missing layer", [](Edit& e) { e.remove_attr("/taps/blk.0.attn_q", "layer"); },
       "/taps/blk.0.attn_q", "attribute 'layer': missing"},
      {"layer disagrees with the group name",
       [](Edit& e) { e.set_int("/taps/blk.0.attn_q", "layer", 1); }, "/taps/blk.0.attn_q",
       "make 'blk.1.attn_q', not the group's name"},
      {"row_shape of rank 0",
       [](Edit& e) {
         e.remove_attr("/taps/blk.0.attn_q", "row_shape");
         e.set_int("/taps/blk.0.attn_q", "row_shape", 4);
       },
       "/taps/blk.0.attn_q", "attribute 'row_shape': expected a 1-D integer array"},
      {"index outside /committed", [](Edit& e) { e.set_int("/taps/blk.0.attn_q", "index", 7); },
       "/taps/blk.0.attn_q", "attribute 'index': 7 is outside /committed"},
      {"runs that go backwards",
       [](Edit& e) {
         e.set_pair("/committed", 0, 3, 2);
         e.append_run("/taps/blk.0.attn_q/runs", 1, 0);
       },
       "/taps/blk.0.attn_q/runs", "run 1 (first_row 1, first_position 0): expected rows and"},
      {"more committed runs than rows", [](Edit& e) { e.set_pair("/committed", 0, 3, 9); },
       "/committed", "inconsistent counts: 3 rows in 9 runs"},
      {"committed runs beyond the runs dataset", [](Edit& e) { e.set_pair("/committed", 0, 3, 2); },
       "/taps/blk.0.attn_q/runs", "committed runs 2 exceed its 1 rows"},
      // Huge claims: refused from the counts, before a row is read or a buffer allocated (an
      // HDF5 dataset can declare a billion rows it never stores).
      {"a billion committed tokens",
       [](Edit& e) {
         e.set_int("/", "committed_tokens", 1'000'000'000);
         e.replace_dataset("/tokens", H5T_STD_I64LE, {1'000'000'000});
       },
       "/tokens", "a committed count of 1000000000 is more than the 16777216 this reader accepts"},
      {"a tap with a billion positions",
       [](Edit& e) {
         e.replace_dataset("/taps/blk.0.attn_q/data", H5T_IEEE_F32LE, {1'000'000'000, 4});
         e.set_pair("/committed", 0, 1'000'000'000, 1);
       },
       "/committed",
       "row 0 (blk.0.attn_q): 1000000000 committed positions is more than the 16777216"},
      {"committed rows the file does not store",
       [](Edit& e) {
         e.replace_dataset("/taps/blk.0.attn_q/data", H5T_IEEE_F32LE, {3, 4});  // never written
       },
       "/taps/blk.0.attn_q/data",
       "committed rows 3 of 4 floats need 48 bytes, but the file stores only 0 for this dataset"},
      {"a billion taps",
       [](Edit& e) { e.replace_dataset("/committed", H5T_STD_I64LE, {1'000'000'000, 2}); },
       "/committed", "1000000000 rows is more than the 1048576 this reader accepts"},
      {"a row of 2^60 elements",
       [](Edit& e) {
         e.set_int_array("/taps/blk.0.attn_q", "row_shape", {1 << 20, 1 << 20, 1 << 20});
       },
       "/taps/blk.0.attn_q",
       "attribute 'row_shape': [1048576, 1048576, 1048576] is more than the 4294967296 elements"},
      {"a run at position 2^63-1",
       [](Edit& e) {
         e.set_pair("/taps/blk.0.attn_q/runs", 0, 0, std::numeric_limits<std::int64_t>::max());
       },
       "/taps/blk.0.attn_q/runs",
       "run 0 (first_row 0, first_position 9223372036854775807): expected a row in 0..2 and a "
       "position in 0..16777215"},
      {"a run starting at row -2^63",
       [](Edit& e) {
         e.set_pair("/committed", 0, 3, 2);
         e.append_run("/taps/blk.0.attn_q/runs", std::numeric_limits<std::int64_t>::min(), 5);
       },
       "/taps/blk.0.attn_q/runs", "run 0 (first_row 0, first_position 0): expected a row in 0..2"},
  };
  return all;
}

TEST(TraceMalformed, EveryMutationGivesANamedError) {
  for (const Case& c : cases()) {
    TempDir dir;
    const std::string path = dir.file("bad.h5");
    write_valid(path);
    {
      Edit edit(path);
      c.edit(edit);
    }
    try {
      TraceReader reader(path);
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const TraceError& e) {
      EXPECT_EQ(e.file(), path) << c.what;
      EXPECT_EQ(e.object(), c.object) << c.what << ": " << e.what();
      EXPECT_NE(e.problem().find(c.needle), std::string::npos) << c.what << ": " << e.what();
    }
  }
}

TEST(TraceMalformed, NewerMinorVersionOpens) {
  TempDir dir;
  const std::string path = dir.file("minor.h5");
  write_valid(path);
  {
    Edit edit(path);
    edit.set_string("/", "format_version", "1.7");
    edit.set_string("/", "a_future_attribute", "ignored");
  }
  const TraceReader r(path);
  EXPECT_EQ(r.format_version().minor, 7);
  EXPECT_EQ(r.tap("attn_q", 0).n_rows, 3);
}

TEST(TraceMalformed, NotATraceFile) {
  TempDir dir;
  const std::string text = dir.file("notes.txt");
  std::ofstream(text) << "hello\n";
  struct FileCase {
    std::string path;
    const char* needle;
  };
  const FileCase files[] = {{text, "not an HDF5 file"},
                            {dir.file("absent.h5"), "no such file"},
                            {dir.path().string(), "is a directory"}};
  for (const FileCase& c : files) {
    try {
      TraceReader reader(c.path);
      ADD_FAILURE() << c.path;
    } catch (const TraceError& e) {
      EXPECT_EQ(e.file(), c.path);
      EXPECT_NE(e.problem().find(c.needle), std::string::npos) << e.what();
    }
  }
}

TEST(TraceMalformed, TruncatedFilesAreRejectedNotCrashedOn) {
  TempDir dir;
  const std::string path = dir.file("whole.h5");
  write_valid(path);
  const auto size = std::filesystem::file_size(path);
  for (const double fraction : {0.1, 0.5, 0.9, 0.99}) {
    const std::string cut = dir.file("cut.h5");
    std::filesystem::copy_file(path, cut, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(cut,
                                 static_cast<std::uintmax_t>(static_cast<double>(size) * fraction));
    try {
      TraceReader reader(cut);
      for (const TapInfo& t : reader.taps()) reader.read(t);
      ADD_FAILURE() << "accepted a file cut to " << fraction;
    } catch (const TraceError& e) {
      EXPECT_EQ(e.file(), cut) << e.what();
    }
  }
}

}  // namespace
}  // namespace tapdiff
