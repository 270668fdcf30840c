# TAPDIFF_SANITIZE=ON (the `sanitize` preset): every C and C++ target is built with ASan+UBSan,
# and any report aborts the test that triggered it. Host-only: nvcc cannot take these flags.
option(TAPDIFF_SANITIZE "Build every C/C++ target with AddressSanitizer and UBSan" OFF)

if(TAPDIFF_SANITIZE)
  set(TAPDIFF_SANITIZER_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all
      -fno-omit-frame-pointer)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${TAPDIFF_SANITIZER_FLAGS}>")
  add_link_options(-fsanitize=address,undefined)
  # ASan's instrumentation makes GCC 12 report -Wmaybe-uninitialized inside libstdc++ (<regex>,
  # std::function) where nothing is uninitialized; the default build keeps the warning.
  add_compile_options("$<$<AND:$<COMPILE_LANGUAGE:C,CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-maybe-uninitialized>")
endif()
