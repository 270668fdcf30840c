# Reference decode benchmark (included from bench/CMakeLists.txt).
add_library(tapdiff_bench_common STATIC
  ${CMAKE_CURRENT_LIST_DIR}/bandwidth.cpp ${CMAKE_CURRENT_LIST_DIR}/machine.cpp)
target_include_directories(tapdiff_bench_common PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(tapdiff_bench_common PUBLIC fmt::fmt OpenMP::OpenMP_CXX)
tapdiff_warnings(tapdiff_bench_common)

add_executable(bench_reference ${CMAKE_CURRENT_LIST_DIR}/bench_reference.cpp)
target_link_libraries(bench_reference PRIVATE tapdiff_reference tapdiff_fixtures
  tapdiff_bench_common CLI11::CLI11)
tapdiff_warnings(bench_reference)
