// The intrinsics as the host's AVX-512 code includes them. Host only: include from x86-64
// translation units compiled by GCC or Clang.
#pragma once

#include <immintrin.h>

// GCC 12's AVX-512 inserts, broadcasts and shuffles start from _mm512_undefined_*(), which
// -Wmaybe-uninitialized reports once inlined into an includer: every lane of their results is
// written.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
