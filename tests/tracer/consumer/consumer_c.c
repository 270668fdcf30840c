/* Writes a one-tap trace through the installed C header. */
#include <stdio.h>

#include "tapdiff/trace.h"

int main(int argc, char** argv) {
  tapdiff_trace_config cfg;
  tapdiff_trace* t = NULL;
  const float row[2] = {1.0f, 2.0f};
  const int64_t shape[1] = {2};
  if (argc != 2) return 64;
  tapdiff_trace_config_init(&cfg);
  if (tapdiff_trace_open(argv[1], &cfg, &t) != TAPDIFF_OK ||
      tapdiff_trace_record(t, "output", -1, 0, 1, shape, 1, row) != TAPDIFF_OK ||
      tapdiff_trace_end_step(t) != TAPDIFF_OK || tapdiff_trace_close(t) != TAPDIFF_OK) {
    fprintf(stderr, "%s\n", tapdiff_last_error());
    return 1;
  }
  return 0;
}
