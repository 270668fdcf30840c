# bench_models: SmolLM2-135M-Instruct (Q4_1 original and an F32 copy) through the reference and
# the host engine, tracing cost and diff throughput (included from bench/CMakeLists.txt).
#   build/bench/bench_models --threads 2 -o bench/results/models.md   (needs `make models`)
add_executable(bench_models
  ${CMAKE_CURRENT_LIST_DIR}/bench_models.cpp
  ${CMAKE_CURRENT_LIST_DIR}/f32_copy.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hdf5_read.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sgemm_probe.cpp)
target_link_libraries(bench_models PRIVATE tapdiff_cli tapdiff_bench_common BLAS::BLAS HDF5::HDF5
  CLI11::CLI11 fmt::fmt)
tapdiff_warnings(bench_models)
# LD_PRELOADed into one series of bench_models's `tapdiff run` processes (bench/discard_writes.c).
add_library(discard_writes MODULE ${CMAKE_CURRENT_LIST_DIR}/discard_writes.c)
target_link_libraries(discard_writes PRIVATE ${CMAKE_DL_LIBS})
add_dependencies(bench_models discard_writes)
