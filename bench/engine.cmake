# bench_engine: host executor prefill (pp128) and decode (tg64) tokens/s on a
# SmolLM2-135M-shaped fixture, f32 and f16, 2 threads. Included from bench/CMakeLists.txt.
# Run: OMP_WAIT_POLICY=passive build/bench/bench_engine  (writes bench/results/engine.md; the
# passive policy matters on a shared machine, docs/engine.md "Threads")
add_executable(bench_engine ${CMAKE_CURRENT_LIST_DIR}/engine_bench.cpp)
target_link_libraries(bench_engine PRIVATE tapdiff_engine tapdiff_fixtures tapdiff_git_commit fmt::fmt
                      BLAS::BLAS OpenMP::OpenMP_CXX)
target_compile_definitions(bench_engine PRIVATE TAPDIFF_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
tapdiff_warnings(bench_engine)

# bench_matmul: one 4096 x 4096 decode product per weight encoding, matvec against precision
# q8's quantize_q8 + matmul_q8 (writes bench/results/matmul.md).
add_executable(bench_matmul ${CMAKE_CURRENT_LIST_DIR}/matmul_bench.cpp)
target_link_libraries(bench_matmul PRIVATE tapdiff_engine tapdiff_model tapdiff_bench_common fmt::fmt)
target_compile_definitions(bench_matmul PRIVATE TAPDIFF_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
tapdiff_warnings(bench_matmul)
