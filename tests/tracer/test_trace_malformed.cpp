// Malformed traces: each mutation of a valid trace must give a TraceError naming the file,
// the HDF5 object and what was expected; newer minor versions must still open.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <array>
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

// A valid trace: blk.0.attn_q and blk.1.attn_q (slots 0 and 1 of /taps/attn_q, indices 0 and
// 1), each with 3 rows of 4 floats at positions 0..2.
void write_valid(const std::string& path) {
  TraceWriter w(path, test::sample_metadata());
  for (int p = 0; p < 3; ++p) {
    const std::vector<float> row(4, static_cast<float>(p));
    w.record("attn_q", 0, p, 1, {4}, row.data());
    w.record("attn_q", 1, p, 1, {4}, row.data());
    w.end_step();
  }
  w.close();
}

// A prompt of two positions (a batched step: its rows go to each stack's batch), then a decode
// step at position 2 (to data).
void write_batched(const std::string& path) {
  TraceWriter w(path, test::sample_metadata());
  const std::vector<float> prompt(8, 1.0f), step(4, 2.0f);
  for (int layer = 0; layer < 2; ++layer) w.record("attn_q", layer, 0, 2, {4}, prompt.data());
  w.end_step();
  for (int layer = 0; layer < 2; ++layer) w.record("attn_q", layer, 2, 1, {4}, step.data());
  w.end_step();
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
    write_pair(name, {row, 0}, {a, b});
  }
  // Overwrites the third column of /committed: the rows of a tap in its stack's batch.
  void set_batch_rows(hsize_t row, std::int64_t rows) {
    const hid_t ds = H5Dopen2(file_, "/committed", H5P_DEFAULT);
    const hid_t space = H5Dget_space(ds);
    const hsize_t start[2] = {row, 2}, count[2] = {1, 1};
    H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr);
    const hid_t mem = H5Screate_simple(2, count, nullptr);
    H5Dwrite(ds, H5T_NATIVE_INT64, mem, space, H5P_DEFAULT, &rows);
    H5Sclose(mem);
    H5Sclose(space);
    H5Dclose(ds);
  }
  // Overwrites runs[run, slot] of a stack's (n_runs, n_slots, 2) runs dataset.
  void set_run(const char* name, hsize_t run, hsize_t slot, std::int64_t first_row,
               std::int64_t first_position) {
    write_pair(name, {run, slot, 0}, {first_row, first_position});
  }
  // Adds a run row to a stack's runs dataset and sets it for one slot.
  void append_run(const char* name, hsize_t slot, std::int64_t first_row,
                  std::int64_t first_position) {
    const hid_t ds = H5Dopen2(file_, name, H5P_DEFAULT);
    hsize_t dims[3];
    const hid_t old_space = H5Dget_space(ds);
    H5Sget_simple_extent_dims(old_space, dims, nullptr);
    H5Sclose(old_space);
    const hsize_t new_dims[3] = {dims[0] + 1, dims[1], 2};
    H5Dset_extent(ds, new_dims);
    H5Dclose(ds);
    set_run(name, dims[0], slot, first_row, first_position);
  }
  void copy_object(const char* from, const char* to) {
    H5Ocopy(file_, from, file_, to, H5P_DEFAULT, H5P_DEFAULT);
  }

private:
  // Writes two int64 values along the last dimension, starting at `start`.
  void write_pair(const char* name, std::vector<hsize_t> start,
                  const std::array<std::int64_t, 2>& values) {
    const hid_t ds = H5Dopen2(file_, name, H5P_DEFAULT);
    const hid_t space = H5Dget_space(ds);
    std::vector<hsize_t> count(start.size(), 1);
    count.back() = 2;
    H5Sselect_hyperslab(space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
    const hid_t mem = H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr);
    H5Dwrite(ds, H5T_NATIVE_INT64, mem, space, H5P_DEFAULT, values.data());
    H5Sclose(mem);
    H5Sclose(space);
    H5Dclose(ds);
  }

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
      {"newer major version", [](Edit& e) { e.set_string("/", "format_version", "4.0"); }, "/",
       "format_version 4.0 is newer than this reader supports (3.x): upgrade tapdiff"},
      {"older major version (per-tap groups)",
       [](Edit& e) { e.set_string("/", "format_version", "1.0"); }, "/",
       "format_version 1.0 is older than any this reader supports (2.x to 3.x): record the trace again"},
      {"unparsable version", [](Edit& e) { e.set_string("/", "format_version", "one"); }, "/",
       "expected MAJOR.MINOR, got \"one\""},
      {"missing producer", [](Edit& e) { e.remove_attr("/", "producer"); }, "/",
       "attribute 'producer': missing"},
      {"unknown producer", [](Edit& e) { e.set_string("/", "producer", "gpu"); }, "/",
       "attribute 'producer': expected reference, engine-host, engine-cuda, external, llama.cpp or transformers"},
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
       [](Edit& e) { e.replace_dataset("/taps/attn_q/data", H5T_IEEE_F32LE, {3, 4}); },
       "/taps/attn_q/data", "expected shape [*, >= 2 slots, 4], got [3, 4]"},
      {"data of the wrong row width",
       [](Edit& e) {
         e.replace_dataset("/taps/attn_q/data", H5T_IEEE_F32LE, {3, 2, 5});
       },
       "/taps/attn_q/data", "expected shape [*, >= 2 slots, 4], got [3, 2, 5]"},
      {"data with fewer slots than the stack",
       [](Edit& e) {
         e.replace_dataset("/taps/attn_q/data", H5T_IEEE_F32LE, {3, 1, 4});
       },
       "/taps/attn_q/data", "expected shape [*, >= 2 slots, 4], got [3, 1, 4]"},
      {"data of the wrong type",
       [](Edit& e) {
         e.replace_dataset("/taps/attn_q/data", H5T_STD_I32LE, {3, 2, 4});
       },
       "/taps/attn_q/data", "expected float32 elements, got integer of 4 bytes"},
      {"float64 data",
       [](Edit& e) {
         e.replace_dataset("/taps/attn_q/data", H5T_IEEE_F64LE, {3, 2, 4});
       },
       "/taps/attn_q/data", "expected float32 elements, got float of 8 bytes"},
      {"fewer data rows than committed",
       [](Edit& e) {
         e.replace_dataset("/taps/attn_q/data", H5T_IEEE_F32LE, {2, 2, 4});
       },
       "/taps/attn_q/data", "slot 0: committed rows 3 exceed its 2 rows"},
      {"missing data", [](Edit& e) { e.remove_link("/taps/attn_q/data"); }, "/taps/attn_q/data",
       "missing dataset"},
      {"runs of the wrong shape",
       [](Edit& e) { e.replace_dataset("/taps/attn_q/runs", H5T_STD_I64LE, {1, 2}); },
       "/taps/attn_q/runs", "expected shape [*, >= 2 slots, 2], got [1, 2]"},
      {"missing layers", [](Edit& e) { e.remove_attr("/taps/attn_q", "layers"); }, "/taps/attn_q",
       "attribute 'layers': missing"},
      {"layers and index of different lengths",
       [](Edit& e) { e.set_int_array("/taps/attn_q", "layers", {0}); }, "/taps/attn_q",
       "attributes 'layers' and 'index': expected one value per slot in each, got 1 and 2"},
      {"a layer in two slots", [](Edit& e) { e.set_int_array("/taps/attn_q", "layers", {0, 0}); },
       "/taps/attn_q", "attribute 'layers': layer 0 appears in two slots"},
      {"a layer below -1", [](Edit& e) { e.set_int_array("/taps/attn_q", "layers", {0, -5}); },
       "/taps/attn_q", "attribute 'layers': slot 1: expected a layer index or -1, got -5"},
      {"a global slot of a blk.* name",
       [](Edit& e) {
         e.copy_object("/taps/attn_q", "/taps/blk.x");
         e.remove_link("/taps/attn_q");
         e.set_string("/taps/blk.x", "name", "blk.x");
         e.set_int_array("/taps/blk.x", "layers", {0, -1});
       },
       "/taps/blk.x", "attribute 'layers': slot 1: expected a layer index, got -1"},
      {"name disagrees with the group's name",
       [](Edit& e) { e.set_string("/taps/attn_q", "name", "attn_k"); }, "/taps/attn_q",
       "attribute 'name': 'attn_k' does not name this group (expected 'attn_k' or 'attn_k#<k>')"},
      {"row_shape of rank 0",
       [](Edit& e) {
         e.remove_attr("/taps/attn_q", "row_shape");
         e.set_int("/taps/attn_q", "row_shape", 4);
       },
       "/taps/attn_q", "attribute 'row_shape': expected a 1-D integer array"},
      {"index outside /committed", [](Edit& e) { e.set_int_array("/taps/attn_q", "index", {0, 7}); },
       "/taps/attn_q", "attribute 'index': slot 1 (blk.1.attn_q): 7 is outside /committed (2 taps)"},
      {"two slots with one index",
       [](Edit& e) { e.set_int_array("/taps/attn_q", "index", {1, 1}); }, "/taps/attn_q",
       "attribute 'index': slot 1 (blk.1.attn_q) has index 1, already that of blk.0.attn_q"},
      {"one tap in two stacks",
       [](Edit& e) {
         e.copy_object("/taps/attn_q", "/taps/attn_q#2");
         e.set_int_array("/taps/attn_q#2", "index", {2, 3});
         e.replace_dataset("/committed", H5T_STD_I64LE, {4, 3});
         for (hsize_t i = 0; i < 4; ++i) e.set_pair("/committed", i, 3, 1);
       },
       "/taps/attn_q#2", "tap blk.0.attn_q is also in slot 0 of /taps/attn_q"},
      {"runs that go backwards",
       [](Edit& e) {
         e.set_pair("/committed", 1, 3, 2);
         e.append_run("/taps/attn_q/runs", 1, 1, 0);
       },
       "/taps/attn_q/runs",
       "slot 1 (blk.1.attn_q): run 1 (first_row 1, first_position 0): expected rows and"},
      {"more committed runs than rows", [](Edit& e) { e.set_pair("/committed", 0, 3, 9); },
       "/committed", "row 0 (blk.0.attn_q): inconsistent counts: 3 rows in 9 runs"},
      {"committed runs beyond the runs dataset", [](Edit& e) { e.set_pair("/committed", 0, 3, 2); },
       "/taps/attn_q/runs", "committed runs 2 exceed its 1 rows"},
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
         e.replace_dataset("/taps/attn_q/data", H5T_IEEE_F32LE, {1'000'000'000, 2, 4});
         e.set_pair("/committed", 0, 1'000'000'000, 1);
       },
       "/committed",
       "row 0 (blk.0.attn_q): 1000000000 committed positions is more than the 16777216"},
      {"committed rows the file does not store",
       [](Edit& e) {
         e.replace_dataset("/taps/attn_q/data", H5T_IEEE_F32LE, {3, 2, 4});  // never written
       },
       "/taps/attn_q/data",
       "committed rows of 4 floats need 96 bytes, but the file stores only 0 for this dataset"},
      {"a billion taps",
       [](Edit& e) { e.replace_dataset("/committed", H5T_STD_I64LE, {1'000'000'000, 3}); },
       "/committed", "1000000000 rows is more than the 1048576 this reader accepts"},
      {"a row of 2^60 elements",
       [](Edit& e) {
         e.set_int_array("/taps/attn_q", "row_shape", {1 << 20, 1 << 20, 1 << 20});
       },
       "/taps/attn_q",
       "attribute 'row_shape': [1048576, 1048576, 1048576] is more than the 4294967296 elements"},
      {"a run at position 2^63-1",
       [](Edit& e) {
         e.set_run("/taps/attn_q/runs", 0, 1, 0, std::numeric_limits<std::int64_t>::max());
       },
       "/taps/attn_q/runs",
       "slot 1 (blk.1.attn_q): run 0 (first_row 0, first_position 9223372036854775807): expected "
       "a row in 0..2 and a position in 0..16777215"},
      {"a run starting at row -2^63",
       [](Edit& e) {
         e.set_pair("/committed", 0, 3, 2);
         e.append_run("/taps/attn_q/runs", 0, std::numeric_limits<std::int64_t>::min(), 5);
       },
       "/taps/attn_q/runs",
       "slot 0 (blk.0.attn_q): run 0 (first_row 0, first_position 0): expected a row in 0..2"},
  };
  return all;
}

// Applies the case's edit to the trace at path; opening it must fail with the case's error.
void expect_named_error(const std::string& path, const Case& c) {
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

TEST(TraceMalformed, EveryMutationGivesANamedError) {
  for (const Case& c : cases()) {
    TempDir dir;
    const std::string path = dir.file("bad.h5");
    write_valid(path);
    expect_named_error(path, c);
  }
}

const std::vector<Case>& batch_cases() {
  static const std::vector<Case> all = {
      {"more batch rows than rows", [](Edit& e) { e.set_batch_rows(0, 4); }, "/committed",
       "row 0 (blk.0.attn_q): 4 rows in the stack's batch, expected 0 to its 3 rows"},
      {"negative batch rows", [](Edit& e) { e.set_batch_rows(1, -1); }, "/committed",
       "row 1 (blk.1.attn_q): -1 rows in the stack's batch, expected 0 to its 3 rows"},
      {"batch rows beyond the batch dataset", [](Edit& e) { e.set_batch_rows(0, 3); }, "/taps/attn_q/batch",
       "slot 0: committed batch rows 3 exceed its 2 rows"},
      {"missing batch", [](Edit& e) { e.remove_link("/taps/attn_q/batch"); }, "/taps/attn_q/batch",
       "missing dataset"},
      {"batch of the wrong shape",
       [](Edit& e) { e.replace_dataset("/taps/attn_q/batch", H5T_IEEE_F32LE, {2, 4}); }, "/taps/attn_q/batch",
       "expected shape [>= 2 slots, *, 4], got [2, 4]"},
      {"batch of integers",
       [](Edit& e) { e.replace_dataset("/taps/attn_q/batch", H5T_STD_I32LE, {2, 2, 4}); }, "/taps/attn_q/batch",
       "expected float32 elements, got integer of 4 bytes"},
      {"data too short for the rows after the batch",
       [](Edit& e) { e.replace_dataset("/taps/attn_q/data", H5T_IEEE_F32LE, {2, 2, 4}); }, "/taps/attn_q/data",
       "slot 0: committed rows 3 exceed its 2 rows"},
      {"a 2.x trace, whose /committed has two columns",
       [](Edit& e) { e.set_string("/", "format_version", "2.2"); }, "/committed", "expected shape [*, 2]"},
  };
  return all;
}

TEST(TraceMalformed, EveryBatchMutationGivesANamedError) {
  TempDir dir;
  const std::string valid = dir.file("valid.h5");
  write_batched(valid);
  const TraceReader r(valid);
  ASSERT_EQ(r.tap("attn_q", 0).batch_rows, 2);
  for (const Case& c : batch_cases()) {
    const std::string path = dir.file("bad.h5");
    std::filesystem::copy_file(valid, path, std::filesystem::copy_options::overwrite_existing);
    expect_named_error(path, c);
  }
}

// One row of one tap at position 0, in a trace whose /dims describe it (n_embd 6, 2 heads of 3,
// n_vocab 5, n_ctx 4).
void write_one_row_with_dims(const std::string& path, const char* name, int layer, const RowShape& shape) {
  TraceMetadata m = test::sample_metadata();
  m.dims = TapDims{1, 6, 2, 1, 3, 4, 5, 4};
  TraceWriter w(path, m);
  const std::vector<float> row(std::size_t(shape.elements()), 0.5f);
  w.record(name, layer, 0, 1, shape, row.data());
  w.end_step();
  w.close();
}

// /dims that do not describe the rows (a producer's n_head of 2^40): reading attn.probs over a
// shorter context leaves them as stored, without building anything the size the dims claim.
TEST(TraceMalformed, DimsThatDoNotDescribeTheRowsKeepTheirContext) {
  TempDir dir;
  const std::string path = dir.file("dims.h5");
  write_one_row_with_dims(path, "attn.probs", 0, {2, 4});
  Edit(path).set_int("/dims", "n_head", std::int64_t{1} << 40);
  TraceReader r(path);
  EXPECT_TRUE(r.read_context_as(3).empty());
  EXPECT_EQ(r.tap("attn.probs", 0).row_shape, (std::vector<std::int64_t>{2, 4}));
}

// A declared layout the rows do not have (a pad of 2^40 vocabulary entries): read as stored,
// with a note, at once; nothing the size the layout claims is built.
TEST(TraceMalformed, ALayoutTheRowsDoNotHaveIsReadAsStored) {
  TempDir dir;
  const std::string path = dir.file("layout.h5");
  write_one_row_with_dims(path, "output", -1, {5});
  {
    const hid_t file = test::open_raw(path, H5F_ACC_RDWR);
    H5Gclose(H5Gcreate2(file, "/layouts", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5Fclose(file);
  }
  Edit(path).set_string("/layouts", "output", "pad=n_vocab:1099511627776");
  const TraceReader r(path);
  const TapInfo& t = r.tap("output", -1);
  EXPECT_EQ(t.row_shape, (std::vector<std::int64_t>{5}));
  EXPECT_FALSE(t.alignment);
  EXPECT_NE(t.layout_note.find("read as stored"), std::string::npos) << t.layout_note;
}

TEST(TraceMalformed, NewerMinorVersionOpens) {
  TempDir dir;
  const std::string path = dir.file("minor.h5");
  write_valid(path);
  {
    Edit edit(path);
    edit.set_string("/", "format_version", "3.7");
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
