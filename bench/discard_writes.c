// LD_PRELOAD module for bench_models: every pwrite of at least 16 KiB returns as if written
// without writing. A traced `tapdiff run` under it pays all of its writer's work but the copy
// of the trace's data into the page cache (smaller writes, most of HDF5's metadata, still go
// to the file; a run reads back none of what it wrote). The file it leaves is not a trace.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sys/types.h>
#include <unistd.h>

enum { kDiscardFrom = 16 * 1024 };

ssize_t pwrite64(int fd, const void* buf, size_t n, off_t offset) {
  static ssize_t (*real)(int, const void*, size_t, off_t);
  if (n >= kDiscardFrom) return (ssize_t)n;
  if (!real) real = (ssize_t(*)(int, const void*, size_t, off_t))dlsym(RTLD_NEXT, "pwrite64");
  return real(fd, buf, n, offset);
}

ssize_t pwrite(int fd, const void* buf, size_t n, off_t offset) { return pwrite64(fd, buf, n, offset); }
