# Installs the tracer and cli components of BUILD_DIR into WORK_DIR/prefix, configures the
# consumer project (CONSUMER_DIR) against it with find_package(tapdiff), and runs its tests:
# the clean check must pass and write its reports, the check of a faulty engine must fail.
#   cmake -DBUILD_DIR=... -DWORK_DIR=... -DCONSUMER_DIR=... -DGENERATOR=... -P run_regression_consumer.cmake
include(${CMAKE_CURRENT_LIST_DIR}/../../install_consumer.cmake)
install_components(tracer cli)
run(${prefix}/bin/tapdiff fixture --arch llama --seed 3 -o ${WORK_DIR}/model.gguf)
run(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} -DMODEL=${WORK_DIR}/model.gguf)

execute_process(COMMAND ${CMAKE_CTEST_COMMAND} --test-dir ${WORK_DIR}/build -N -L tapdiff-regression
                OUTPUT_VARIABLE listed)
if(NOT listed MATCHES "Total Tests: 2")
  message(FATAL_ERROR "expected 2 tests labelled tapdiff-regression:\n${listed}")
endif()
execute_process(COMMAND ${CMAKE_CTEST_COMMAND} --test-dir ${WORK_DIR}/build -R "^clean$" --output-on-failure
                RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the clean check failed:\n${out}")
endif()
foreach(ext html md xml)
  if(NOT EXISTS ${WORK_DIR}/build/reports/clean.${ext})
    message(FATAL_ERROR "REPORT_DIR: reports/clean.${ext} was not written")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_CTEST_COMMAND} --test-dir ${WORK_DIR}/build -R "^faulty$"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(rc EQUAL 0)
  message(FATAL_ERROR "the check of an engine with attn-scale passed:\n${out}")
endif()
message(STATUS "tapdiff_add_regression through find_package(tapdiff): clean passes, faulty fails")
