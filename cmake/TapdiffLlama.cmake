# libllama and ggml for `tapdiff run --backend llama.cpp`, from the pinned llama-cpp-python
# package that scripts/bootstrap.sh installs into build/venv (it ships the shared libraries,
# their headers and CMake packages beside its llama_cpp/ package: site-packages/lib,
# site-packages/include, site-packages/lib/cmake/{llama,ggml}).
#
# TAPDIFF_LLAMA: AUTO (use it when found), ON (fail without it) or OFF.
# TAPDIFF_PYTHON: the Python whose llama_cpp package to use.
# Sets TAPDIFF_LLAMA_FOUND, TAPDIFF_LLAMA_PACKAGE (the site-packages directory holding it) and
# TAPDIFF_LLAMA_PY_VERSION; find_package(llama) defines LLAMA_VERSION and LLAMA_BUILD_COMMIT.
set(TAPDIFF_LLAMA AUTO CACHE STRING "Build the llama.cpp backend: AUTO (when libllama is found), ON or OFF")
if(DEFINED ENV{TAPDIFF_LLAMA})  # as scripts/bootstrap.sh reads it: `TAPDIFF_LLAMA=OFF make test`
  set(TAPDIFF_LLAMA $ENV{TAPDIFF_LLAMA} CACHE STRING "" FORCE)
endif()
set_property(CACHE TAPDIFF_LLAMA PROPERTY STRINGS AUTO ON OFF)

set(TAPDIFF_LLAMA_FOUND OFF)
set(_why "")
if(TAPDIFF_LLAMA STREQUAL "OFF")
  set(_why "TAPDIFF_LLAMA=OFF")
elseif(NOT EXISTS ${TAPDIFF_PYTHON})
  set(_why "no Python at ${TAPDIFF_PYTHON} (scripts/bootstrap.sh makes it)")
else()
  # find_spec locates the package without importing it (importing loads libllama).
  execute_process(
    COMMAND ${TAPDIFF_PYTHON} -c
            "import importlib.util, os; s = importlib.util.find_spec('llama_cpp'); print(os.path.dirname(os.path.dirname(s.origin)) if s else '')"
    OUTPUT_VARIABLE TAPDIFF_LLAMA_PACKAGE OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT TAPDIFF_LLAMA_PACKAGE)
    set(_why "${TAPDIFF_PYTHON} has no llama_cpp package (scripts/bootstrap.sh installs llama-cpp-python)")
  else()
    find_package(llama CONFIG QUIET PATHS ${TAPDIFF_LLAMA_PACKAGE}/lib/cmake NO_DEFAULT_PATH)
    if(NOT llama_FOUND)
      set(_why "${TAPDIFF_LLAMA_PACKAGE} has no lib/cmake/llama package")
    else()
      file(STRINGS ${TAPDIFF_LLAMA_PACKAGE}/llama_cpp/__init__.py _line REGEX "^__version__")
      string(REGEX REPLACE ".*\"([^\"]*)\".*" "\\1" TAPDIFF_LLAMA_PY_VERSION "${_line}")
      set(TAPDIFF_LLAMA_FOUND ON)
    endif()
  endif()
endif()

if(TAPDIFF_LLAMA_FOUND)
  message(STATUS "llama.cpp ${LLAMA_VERSION} (${LLAMA_BUILD_COMMIT}, llama-cpp-python ${TAPDIFF_LLAMA_PY_VERSION}): "
                 "tapdiff run --backend llama.cpp")
elseif(TAPDIFF_LLAMA STREQUAL "ON")
  message(FATAL_ERROR "TAPDIFF_LLAMA=ON, but libllama was not found: ${_why}")
else()
  message(STATUS "llama.cpp backend not built: ${_why}")
endif()
