# Script mode (cmake -P): writes OUTPUT, a header defining TAPDIFF_CUDA_MODULE_TAG, a hash of
# the headers that HEADERS_FILE lists (one path a line). The CUDA module and the program that
# loads it both compile the tag in, and the loader refuses a module whose tag differs: a module
# built against other headers would be called through another Executor layout. The header is
# rewritten only when the tag changes.
file(STRINGS ${HEADERS_FILE} headers)
set(contents "")
foreach(header IN LISTS headers)
  file(READ ${header} text)
  string(APPEND contents "${text}\n")
endforeach()
string(SHA256 tag "${contents}")
string(SUBSTRING ${tag} 0 16 tag)
file(WRITE ${OUTPUT}.new "// Written by cmake/CudaModuleTag.cmake at build time.\n#pragma once\n\n"
                         "#define TAPDIFF_CUDA_MODULE_TAG \"${tag}\"\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different ${OUTPUT}.new ${OUTPUT})
file(REMOVE ${OUTPUT}.new)
