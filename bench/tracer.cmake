# Tracer benchmark (included from bench/CMakeLists.txt): writes bench/results/tracer.md.
#   build/bench/bench_tracer -o bench/results/tracer.md --json bench/results/tracer.json
add_executable(bench_tracer
  ${CMAKE_CURRENT_LIST_DIR}/bench_tracer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tracer_workloads.cpp
  ${CMAKE_CURRENT_LIST_DIR}/machine.cpp)
target_include_directories(bench_tracer PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(bench_tracer PRIVATE tapdiff::tracer HDF5::HDF5 fmt::fmt CLI11::CLI11
  nlohmann_json::nlohmann_json)
tapdiff_warnings(bench_tracer)
# Its smoke test (a tiny run that must write its results) is registered in tests/tracer.
