# Installs the tracer component of BUILD_DIR into WORK_DIR/prefix, then configures, builds and
# runs the consumer project (CONSUMER_DIR) against it with find_package(tapdiff).
#   cmake -DBUILD_DIR=... -DWORK_DIR=... -DCONSUMER_DIR=... -DGENERATOR=... -P run_consumer_test.cmake
include(${CMAKE_CURRENT_LIST_DIR}/../../install_consumer.cmake)
install_components(tracer)
if(NOT EXISTS ${prefix}/lib/cmake/tapdiff/tapdiffConfig.cmake
   AND NOT EXISTS ${prefix}/lib64/cmake/tapdiff/tapdiffConfig.cmake)
  file(GLOB_RECURSE configs ${prefix}/*Config.cmake)
  message(FATAL_ERROR "tapdiffConfig.cmake not installed; found: ${configs}")
endif()
run(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build -j 2)
run(${WORK_DIR}/build/consumer ${WORK_DIR}/cpp.h5)
run(${WORK_DIR}/build/consumer_c ${WORK_DIR}/c.h5)
message(STATUS "find_package(tapdiff) consumer built and ran against ${prefix}")
