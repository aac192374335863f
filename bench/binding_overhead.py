"""Host time per call of the numpy/ctypes binding's generic launch
(kvgen.Kernel.launch, e.g. kernel.reshape_and_cache(...)) on the host
backend (issue 24, item 5: <= 20 us over the launch itself).

Times, for a write (reshape_and_cache, MiMo-V2 geometry: 4 kv heads, K 192,
V 128, bf16, block 16, T = 1) and an attention kernel (paged_attention, the
same cache, 8 query heads, one decode token over 40 cached tokens):
  prepare     Kernel.prepare(...): every check and the argument struct of
              launch(), without the launch (the binding's own cost);
  launch      Kernel.launch(...) (the op-named method): prepare's work, the
              launch, and on the host backend Context.check();
  launch_raw  Kernel.launch_raw(args) of a struct prepare() made, then
              Context.check(): the launch without the binding's work;
  added       launch - launch_raw: what the binding adds per call.
Each variant is called N times in a loop, the variants take turns, R
rounds; per variant the median round (the calling thread's CPU time, which
other processes on a loaded machine do not inflate, and the wall time) and
the best round are printed, in microseconds per call (the host backend
launches on the calling thread, so its CPU time is the launch's too). The first call of each argument shape builds the
binding's plan (checks); later calls with the same shapes, dtypes and
strides reuse it, so the loop times the repeated call, as an engine's decode
step makes it. `first` is prepare()'s time for a call with shapes not seen
before (every check; a new token count each time).

    python3 bench/binding_overhead.py [-n 2000] [-r 7] [--cache-dir DIR]

Needs numpy and a build (KVGEN_LIB, else build/lib) with the generator
library (JIT of the two host kernels: a few seconds each, once per cache
directory). Prints numbers only: nothing here is asserted
(test/python/test_binding.py checks the plan cache's behaviour).
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import kvgen  # noqa: E402


def rounds(fns, n, r):
    """{name: [(wall us, thread CPU us) per call of each round]} with the
    variants taking turns."""
    out = {name: [] for name in fns}
    for _ in range(r):
        for name, fn in fns.items():
            t0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(n):
                fn()
            out[name].append(((time.perf_counter() - t0) / n * 1e6,
                              (time.thread_time() - c0) / n * 1e6))
    return out


def report(title, times):
    print(f"{title}:")
    med = {}
    for k, v in times.items():
        wall = statistics.median(x[0] for x in v)
        cpu = statistics.median(x[1] for x in v)
        med[k] = cpu
        print(f"  {k:<11} {cpu:8.2f} us CPU ({wall:.2f} wall; best round "
              f"{min(x[1] for x in v):.2f} CPU)")
    if "launch" in med and "launch_raw" in med:
        print(f"  {'added':<11} {med['launch'] - med['launch_raw']:8.2f} us "
              "(launch - launch_raw, CPU medians)")


def variants(ctx, k, args, kw):
    """The prepare / launch / launch_raw variants of kernel k on args."""
    raw, stream = k.prepare(*args, **kw)

    def launch():  # kernel.<op>(...), as a caller writes it
        getattr(k, k.op)(*args, **kw)

    def launch_raw():
        k.launch_raw(raw, stream)
        ctx.check()

    return {"prepare": lambda: k.prepare(*args, **kw), "launch": launch,
            "launch_raw": launch_raw}


def first_calls(make_call, count=50):
    """Median thread CPU time of a call whose argument shapes the kernel
    has not seen (make_call(i) builds the i-th call's arguments and returns
    the call)."""
    ts = []
    for i in range(count):
        call = make_call(i)
        c0 = time.thread_time()
        call()
        ts.append((time.thread_time() - c0) * 1e6)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=2000, help="calls per round")
    ap.add_argument("-r", type=int, default=7, help="rounds")
    ap.add_argument("--cache-dir", default=None,
                    help="the runtime's kernel cache (default: a temporary "
                    "directory, so the two kernels are compiled)")
    a = ap.parse_args()
    tmp = None
    if a.cache_dir is None:
        tmp = tempfile.TemporaryDirectory()
        a.cache_dir = tmp.name
    ctx = kvgen.Context("host", cache_dir=a.cache_dir)
    lay = kvgen.Layout(4, 192, 128, 16, dtype="bf16")
    nb = 8
    kc = np.zeros(lay.extent_bytes("k", nb) // 2, np.uint16)
    vc = np.zeros(lay.extent_bytes("v", nb) // 2, np.uint16)

    # The write: T = 1.
    w = ctx.kernel("reshape_and_cache", lay, io="bf16")
    key = np.zeros((1, 4, 192), np.uint16)
    val = np.zeros((1, 4, 128), np.uint16)
    slots = np.array([17], np.int64)

    report(f"reshape_and_cache (T = 1, {w.name})",
           rounds(variants(ctx, w, (key, val, kc, vc, slots), {}), a.n, a.r))

    def new_shape(i):
        t = i + 2  # a token count not seen before; slots -1: pads
        k, v = np.zeros((t, 4, 192), np.uint16), np.zeros((t, 4, 128),
                                                          np.uint16)
        s = np.full(t, -1, np.int64)
        return lambda: w.prepare(k, v, kc, vc, s)

    print(f"  {'first':<11} {first_calls(new_shape):8.2f} us CPU (prepare "
          "with a new T each call: every check)")

    # Attention: one decode token of one sequence of 40 tokens.
    att = ctx.kernel("paged_attention", lay, io="bf16", num_q_heads=8)
    q = np.zeros((1, 8, 192), np.uint16)
    out = np.zeros((1, 8, 128), np.uint16)
    table = np.array([[3, 5, 1, 0]], np.int32)
    seq_lens = np.array([40], np.int32)
    qsl = np.array([0, 1], np.int32)
    kw = dict(softmax_scale=0.07, max_query_len=1, max_seq_len=40)

    args = (q, out, kc, vc, table, seq_lens, qsl)
    report(f"paged_attention (1 query token, 40 cached, {att.name})",
           rounds(variants(ctx, att, args, kw), a.n, a.r))

    def attend_derived():  # max_query_len / max_seq_len from the arrays
        att.prepare(q, out, kc, vc, table, seq_lens, qsl, softmax_scale=0.07)

    report("paged_attention, max_query_len / max_seq_len not given "
           "(derived from the arrays each call)",
           rounds({"prepare": attend_derived}, a.n, a.r))
    if tmp is not None:
        ctx.close()
        tmp.cleanup()


if __name__ == "__main__":
    main()
