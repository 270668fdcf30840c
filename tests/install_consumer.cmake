# Shared by the -P scripts that test an installed tapdiff from a separate CMake project
# (tests/tracer/consumer, tests/app/regression_consumer): checks their -D arguments, defines
# run(), and gives them a fresh WORK_DIR with the install prefix ${prefix} in it.
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

# install_components(COMPONENT...): installs them from BUILD_DIR into ${prefix}.
function(install_components)
  foreach(component ${ARGN})
    run(${CMAKE_COMMAND} --install ${BUILD_DIR} --component ${component} --prefix ${prefix})
  endforeach()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
