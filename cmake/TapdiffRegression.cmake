# tapdiff_add_regression: register a `tapdiff check` as a CTest test (docs/ci.md).
#
#   tapdiff_add_regression(<name>
#     [MODEL <gguf>]              required without GOLDEN; with GOLDEN, overrides the recorded model
#     [TOKENS <id,id,...>]        the prompt; required without GOLDEN, not allowed with it
#     [N_PREDICT <n>]             tokens to generate (default: tapdiff's, 16)
#     [PRECISION <f32|f16|bf16>]  engine precision (default f32; with GOLDEN: the golden's)
#     [BACKEND <host|cuda>]       default host; cuda falls back to host without a device
#     [GOLDEN <trace.h5>]         check against this golden trace instead of the reference
#     [PROFILE <name|json>]       tolerance profile
#     [REPORT_DIR <dir>]          write <dir>/<name>.html, .md and .xml (JUnit) reports
#     [WORKING_DIRECTORY <dir>]
#     [ARGS <more check args>...])
#
# The test passes when the check exits 0 and fails on a divergence (1) or bad input (2). The
# tapdiff it runs: ${TAPDIFF_EXECUTABLE} when set, else the tapdiff::tapdiff target (from
# find_package(tapdiff), or tapdiff's own build).
function(tapdiff_add_regression name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG ""
    "MODEL;TOKENS;N_PREDICT;PRECISION;BACKEND;GOLDEN;PROFILE;REPORT_DIR;WORKING_DIRECTORY" "ARGS")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "tapdiff_add_regression(${name}): unknown arguments: ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(ARG_GOLDEN AND ARG_TOKENS)
    message(FATAL_ERROR "tapdiff_add_regression(${name}): TOKENS comes from the GOLDEN trace; leave it out")
  endif()
  if(NOT ARG_GOLDEN AND (NOT ARG_MODEL OR NOT ARG_TOKENS))
    message(FATAL_ERROR "tapdiff_add_regression(${name}): MODEL and TOKENS are required without GOLDEN")
  endif()

  if(TAPDIFF_EXECUTABLE)
    set(tapdiff "${TAPDIFF_EXECUTABLE}")
  elseif(TARGET tapdiff::tapdiff)
    set(tapdiff "$<TARGET_FILE:tapdiff::tapdiff>")
  else()
    message(FATAL_ERROR "tapdiff_add_regression(${name}): no tapdiff executable: find_package(tapdiff) "
                        "or set TAPDIFF_EXECUTABLE")
  endif()

  set(args check)
  foreach(option MODEL TOKENS N_PREDICT PRECISION BACKEND GOLDEN PROFILE)
    if(DEFINED ARG_${option})
      string(TOLOWER "--${option}" flag)
      string(REPLACE "_" "-" flag "${flag}")
      list(APPEND args "${flag}" "${ARG_${option}}")
    endif()
  endforeach()
  if(ARG_REPORT_DIR)
    file(MAKE_DIRECTORY "${ARG_REPORT_DIR}")
    foreach(ext html md xml)
      list(APPEND args --report "${ARG_REPORT_DIR}/${name}.${ext}")
    endforeach()
  endif()
  list(APPEND args ${ARG_ARGS})

  if(ARG_WORKING_DIRECTORY)
    add_test(NAME ${name} COMMAND "${tapdiff}" ${args} WORKING_DIRECTORY "${ARG_WORKING_DIRECTORY}")
  else()
    add_test(NAME ${name} COMMAND "${tapdiff}" ${args})
  endif()
  set_property(TEST ${name} APPEND PROPERTY LABELS tapdiff-regression)
endfunction()
