# Script mode (cmake -P), run at every build: writes OUTPUT, a C++ file defining
# tapdiff::git_commit(), from the checkout at SOURCE_DIR: HEAD's short hash, with "-dirty"
# when tracked files differ from it, or "unknown" outside a git checkout. The file is rewritten
# only when that string changes, so a build recompiles one file when the commit moves.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SOURCE_DIR}
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
else()
  execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SOURCE_DIR}
                  OUTPUT_VARIABLE changes ERROR_QUIET)
  if(NOT changes STREQUAL "")
    string(APPEND commit "-dirty")
  endif()
endif()
file(WRITE ${OUTPUT}.new "// Written by cmake/GitCommit.cmake at build time.\n#include \"app/git_commit.hpp\"\n\n"
                         "const char* tapdiff::git_commit() { return \"${commit}\"; }\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different ${OUTPUT}.new ${OUTPUT})
file(REMOVE ${OUTPUT}.new)
