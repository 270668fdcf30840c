/* tapdiff trace writer, C ABI: lets an engine written in C, Rust or anything with an FFI write
 * the same HDF5 traces as tapdiff's own programs (docs/trace-schema.md, docs/taps.md).
 *
 * Every function returns a status; on failure tapdiff_last_error() holds a message naming the
 * file, the object and what went wrong (per thread, valid until the next call on that thread).
 * A handle is used from one thread at a time.
 *
 *   tapdiff_trace_config cfg;
 *   tapdiff_trace_config_init(&cfg);
 *   cfg.producer = "external";
 *   tapdiff_trace* t;
 *   if (tapdiff_trace_open("run.h5", &cfg, &t) != TAPDIFF_OK) { puts(tapdiff_last_error()); }
 *   for each step:
 *     if (tapdiff_trace_enabled(t, "attn_q", layer, pos))
 *       tapdiff_trace_record(t, "attn_q", layer, pos, 1, shape, 1, q);   // q: (1, n_embd)
 *     tapdiff_trace_end_step(t);
 *   tapdiff_trace_close(t);   // sets complete=1 and frees t
 */
#ifndef TAPDIFF_TRACE_H
#define TAPDIFF_TRACE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TAPDIFF_TRACE_ABI_VERSION 1

typedef struct tapdiff_trace tapdiff_trace;

typedef enum tapdiff_status {
  TAPDIFF_OK = 0,
  TAPDIFF_ERR_ARGUMENT = 1, /* a null pointer, a bad name, shape or position */
  TAPDIFF_ERR_TRACE = 2,    /* the file: cannot create, write (disk full), malformed */
  TAPDIFF_ERR_STATE = 3,    /* the handle failed earlier and can only be closed */
  TAPDIFF_ERR_INTERNAL = 4  /* out of memory or a bug */
} tapdiff_status;

typedef enum tapdiff_hparam_kind {
  TAPDIFF_HPARAM_INT = 0,
  TAPDIFF_HPARAM_FLOAT = 1,
  TAPDIFF_HPARAM_STRING = 2
} tapdiff_hparam_kind;

typedef struct tapdiff_hparam {
  const char* key;
  tapdiff_hparam_kind kind;
  int64_t int_value;
  double float_value;
  const char* string_value;
} tapdiff_hparam;

/* Model symbols for catalogue shape checks; all 0 = not declared. */
typedef struct tapdiff_dims {
  int64_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
} tapdiff_dims;

/* A tap stored in the producer's own layout (docs/trace-schema.md, "/layouts"). */
typedef struct tapdiff_layout {
  const char* tap;    /* short name, e.g. "attn_q" */
  const char* layout; /* e.g. "axes=head_dim,n_head" or "shard=n_head:1/4" */
} tapdiff_layout;

typedef struct tapdiff_trace_config {
  const char* producer;         /* "reference" | "engine-host" | "engine-cuda" | "external" */
  const char* producer_version; /* NULL = "" */
  const char* git_commit;
  const char* model_path;
  const char* model_sha256; /* 64 lowercase hex digits or NULL/"" */
  const char* precision;    /* NULL = "f32" */
  const char* fault;        /* NULL = "none" */
  int64_t prompt_length;
  const int32_t* tokens; /* (n_tokens,) tokens at positions 0.. */
  size_t n_tokens;
  const tapdiff_hparam* hparams;
  size_t n_hparams;
  tapdiff_dims dims;
  const char* filter_names;     /* globs, e.g. "blk.*.attn_q*,!*.attn.probs"; NULL = all */
  const char* filter_layers;    /* "0-3,7"; NULL = all */
  const char* filter_positions; /* "0-15,100-"; NULL = all */
  int commit_every;             /* steps per durable commit; 0 = 1 */
  int compress;                 /* gzip + shuffle, applied by close() (a compressed copy) */
  int fsync;                    /* fsync after every commit when nonzero */
  const tapdiff_layout* layouts; /* taps in the producer's own layout (needs dims); NULL = none */
  size_t n_layouts;
  /* A lockstep run (docs/guide.md, "Lockstep in your own engine"): the trace whose values every
   * tap point continued from; NULL or "" = a normal run. */
  const char* lockstep_source;
} tapdiff_trace_config;

/* Zeroes cfg and sets the defaults above. */
void tapdiff_trace_config_init(tapdiff_trace_config* cfg);

tapdiff_status tapdiff_trace_open(const char* path, const tapdiff_trace_config* cfg,
                                  tapdiff_trace** out);

/* 1 when the tap is recorded at this position, 0 otherwise (also for a NULL handle). For
 * "attn.probs", also 1 where only its summary, "attn.probs.summary", is recorded. */
int tapdiff_trace_enabled(const tapdiff_trace* trace, const char* name, int layer,
                          int64_t position);
/* 1 when any position in [first_position, first_position + n_positions) is recorded. */
int tapdiff_trace_enabled_range(const tapdiff_trace* trace, const char* name, int layer,
                                int64_t first_position, int64_t n_positions);

/* rows: (n_rows, row_shape[0], ..., row_shape[row_rank-1]) float32, row-major, for positions
 * first_position .. first_position + n_rows - 1. layer = -1 for global taps. Recording
 * "attn.probs" also records "attn.probs.summary" (docs/taps.md) at the end of the step. */
tapdiff_status tapdiff_trace_record(tapdiff_trace* trace, const char* name, int layer,
                                    int64_t first_position, int64_t n_rows,
                                    const int64_t* row_shape, int row_rank, const float* rows);

tapdiff_status tapdiff_trace_append_tokens(tapdiff_trace* trace, const int32_t* tokens,
                                           size_t n_tokens);

tapdiff_status tapdiff_trace_end_step(tapdiff_trace* trace);

/* Commits, sets complete=1 and frees the handle, also when it returns an error. */
tapdiff_status tapdiff_trace_close(tapdiff_trace* trace);

/* Frees the handle without setting complete (for an aborted run); committed steps stay. */
void tapdiff_trace_abandon(tapdiff_trace* trace);

/* The message of the last failed call on this thread, "" when none. */
const char* tapdiff_last_error(void);

const char* tapdiff_status_name(tapdiff_status status);

#ifdef __cplusplus
}
#endif

#endif /* TAPDIFF_TRACE_H */
