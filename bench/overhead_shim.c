/* Timing loops in C for bench/bench.py, so that host overheads are measured
 * without Python/ctypes in the loop. Function pointers are passed in from
 * Python (the kvgen C API and cuLaunchKernel as loaded by ctypes); nothing
 * is linked. Each loop returns the mean wall time per call in nanoseconds and
 * stores the first non-zero status in *status. Built at bench time with
 * `cc -O2 -shared -fPIC`. */
#include <stdint.h>
#include <time.h>

typedef int (*cu_launch_fn)(void *f, unsigned gx, unsigned gy, unsigned gz,
                            unsigned bx, unsigned by, unsigned bz,
                            unsigned shmem, void *stream, void **params,
                            void **extra);
/* kvgen_launch_reshape_and_cache(kernel, args, stream) (kvgen.h). */
typedef int (*kvgen_launch_fn)(void *kernel, const void *args, void *stream);
typedef int (*kvgen_get_spec_fn)(void *ctx, const void *spec, void **out);
typedef int (*kvgen_get_name_fn)(void *ctx, const char *name, void **out);

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

double loop_cu_launch(cu_launch_fn f, void *fn, unsigned grid, unsigned block,
                      void *stream, void **params, int n, int *status) {
  *status = 0;
  double t0 = now_ns();
  for (int i = 0; i < n; ++i) {
    int r = f(fn, grid, 1, 1, block, 1, 1, 0, stream, params, 0);
    if (r && !*status)
      *status = r;
  }
  return (now_ns() - t0) / n;
}

double loop_kvgen_launch(kvgen_launch_fn f, void *kernel, const void *args,
                         void *stream, int n, int *status) {
  *status = 0;
  double t0 = now_ns();
  for (int i = 0; i < n; ++i) {
    int r = f(kernel, args, stream);
    if (r && !*status)
      *status = r;
  }
  return (now_ns() - t0) / n;
}

double loop_get_by_spec(kvgen_get_spec_fn f, void *ctx, const void *spec,
                        int n, int *status) {
  void *out = 0;
  *status = 0;
  double t0 = now_ns();
  for (int i = 0; i < n; ++i) {
    int r = f(ctx, spec, &out);
    if (r && !*status)
      *status = r;
  }
  return (now_ns() - t0) / n;
}

double loop_get_by_name(kvgen_get_name_fn f, void *ctx, const char *name,
                        int n, int *status) {
  void *out = 0;
  *status = 0;
  double t0 = now_ns();
  for (int i = 0; i < n; ++i) {
    int r = f(ctx, name, &out);
    if (r && !*status)
      *status = r;
  }
  return (now_ns() - t0) / n;
}
