# tapdiff_warnings(target): the project's warning set; errors when TAPDIFF_WERROR is on (CI).
function(tapdiff_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX,C>:-Wall -Wextra -Wshadow -Wpedantic>
    $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor>
    $<$<AND:$<COMPILE_LANGUAGE:CXX,C>,$<BOOL:${TAPDIFF_WERROR}>>:-Werror>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${TAPDIFF_WERROR}>>:-Werror=all-warnings>)
endfunction()
