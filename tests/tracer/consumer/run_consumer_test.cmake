# Installs the tracer component of BUILD_DIR into WORK_DIR/prefix, then configures, builds and
# runs the consumer project (CONSUMER_DIR) against it with find_package(tapdiff).
#   cmake -DBUILD_DIR=... -DWORK_DIR=... -DCONSUMER_DIR=... -DGENERATOR=... -P run_consumer_test.cmake
foreach(var BUILD_DIR WORK_DIR CONSUMER_DIR GENERATOR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "${var} is required")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --component tracer --prefix ${prefix})
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
