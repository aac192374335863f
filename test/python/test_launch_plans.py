"""The binding's launch plans (issue 24, item 5): Kernel.launch() checks a
call's arguments once per key (shapes, strides, dtypes, kinds, writeability,
names given, num_blocks / cache_strides / cache_bytes) and remembers the
result; a repeated call only takes addresses, converts scalars, derives the
launch rule's maxima, checks K / V aliasing, finds the workspace and
launches. These tests check that a repeated call reuses its plan, that
anything changing the key is checked again, that what a plan cannot know
(pointers, scalar values, index-array values) is checked on every call, and
that a plan fills the same argument struct as a fresh check does. Host
backend, kernels emitted with build/bin/kvgen; nothing is timed here
(bench/binding_overhead.py prints the host time per call)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

import kvgen  # noqa: E402
from kvgen_emit import emit_all, host_context  # noqa: E402

BUILD = Path(os.environ.get("KVGEN_BUILD_DIR", REPO / "build"))
KVGEN = BUILD / "bin" / "kvgen"
LAY = kvgen.Layout(2, 64, 32, 16, dtype="bf16")
QH = 4


@pytest.fixture(scope="module")
def ctx(tmp_path_factory, kvgen_cli, kernel_cache):
    d = tmp_path_factory.mktemp("plans")
    c = host_context(
        emit_all(d, [(LAY, "reshape_and_cache", ("--io", "bf16", "--slots",
                                                 "i64")),
                     (LAY, "paged_attention", ("--io", "bf16",
                                               "--num_q_heads", QH))]),
        kernel_cache)
    yield c
    c.close()


def write_kernel(ctx):
    return ctx.kernel("reshape_and_cache", LAY, io="bf16", slots="i64")


def attention_kernel(ctx):
    return ctx.kernel("paged_attention", LAY, io="bf16", num_q_heads=QH)


def write_args(rng, T, nb=4):
    key = rng.integers(0, 1 << 14, (T, 2, 64)).astype(np.uint16)
    val = rng.integers(0, 1 << 14, (T, 2, 32)).astype(np.uint16)
    kc = np.zeros(LAY.extent_bytes("k", nb) // 2, np.uint16)
    vc = np.zeros(LAY.extent_bytes("v", nb) // 2, np.uint16)
    slots = rng.choice(nb * 16, T, replace=False).astype(np.int64)
    return key, val, kc, vc, slots


def attention_args(rng, seq_lens, nb=8):
    n = len(seq_lens)
    q = rng.integers(0, 1 << 14, (n, QH, 64)).astype(np.uint16)
    out = np.zeros((n, QH, 32), np.uint16)
    kc = np.zeros(LAY.extent_bytes("k", nb) // 2, np.uint16)
    vc = np.zeros(LAY.extent_bytes("v", nb) // 2, np.uint16)
    table = rng.integers(0, nb, (n, 4)).astype(np.int32)
    lens = np.array(seq_lens, np.int32)
    qsl = np.arange(n + 1, dtype=np.int32)
    return q, out, kc, vc, table, lens, qsl


class Builds:
    """Counts the plans a kernel builds (Kernel._make_plan calls)."""

    def __init__(self, monkeypatch):
        self.n = 0
        real = kvgen.Kernel._make_plan

        def counting(kernel, *a, **kw):
            self.n += 1
            return real(kernel, *a, **kw)
        monkeypatch.setattr(kvgen.Kernel, "_make_plan", counting)


def test_a_repeated_call_reuses_its_plan(ctx, monkeypatch):
    """Same shapes (other arrays, other values): one plan, the same
    results as a fresh kernel's checked launch; another T, another dtype
    of the same size, a read-only input or another keyword set: a new
    plan each."""
    builds = Builds(monkeypatch)
    k = write_kernel(ctx)
    k._plans.clear()
    rng = np.random.default_rng(1)
    for i in range(5):
        key, val, kc, vc, slots = write_args(rng, 6)
        k.reshape_and_cache(key, val, kc, vc, slots)
        ref = [np.zeros_like(kc), np.zeros_like(vc)]
        k._plans.clear()
        k.reshape_and_cache(key, val, ref[0], ref[1], slots)
        np.testing.assert_array_equal(kc, ref[0])
        np.testing.assert_array_equal(vc, ref[1])
        assert kc.any() and vc.any()
    # A fresh check per call above (the plans were cleared), the first
    # call's plan reused by every second call.
    assert builds.n == 6, builds.n
    assert len(k._plans) == 1
    key, val, kc, vc, slots = write_args(rng, 6)
    n = builds.n
    k.reshape_and_cache(key, val, kc, vc, slots)
    assert builds.n == n
    for changed in (
            lambda: write_args(rng, 7),  # another T
            lambda: (key.view(np.int16), val, kc, vc, slots),  # dtype
            lambda: (np.require(key, requirements="C")[:, :, :],
                     val, kc, vc, slots[::1].copy()),  # same key: reused
    ):
        before = builds.n
        k.reshape_and_cache(*changed())
        assert builds.n - before in (0, 1)
    assert builds.n == n + 2, "T and the dtype each built a plan"
    ro = key.copy()
    ro.flags.writeable = False
    k.reshape_and_cache(ro, val, kc, vc, slots)  # inputs may be read-only
    assert builds.n == n + 3
    k.reshape_and_cache(key=key, value=val, key_cache=kc, value_cache=vc,
                        slot_mapping=slots)
    assert builds.n == n + 4, "keywords instead of positions: another key"
    k.reshape_and_cache(key, val, kc, vc, slots, num_blocks=4)
    k.reshape_and_cache(key, val, kc, vc, slots, num_blocks=4)
    assert builds.n == n + 5
    # Types without a key (a numpy subclass, a float num_blocks) are checked
    # on every call and never remembered.
    plans = len(k._plans)
    for _ in range(2):
        k.reshape_and_cache(key.view(np.memmap), val, kc, vc, slots)
    assert builds.n == n + 7 and len(k._plans) == plans


def test_a_changed_key_is_checked_again(ctx):
    """Hostile arguments after a plan was remembered for good ones of
    nearly the same form: each raises as on a first call."""
    k = write_kernel(ctx)
    rng = np.random.default_rng(2)
    key, val, kc, vc, slots = write_args(rng, 4)
    k.reshape_and_cache(key, val, kc, vc, slots)
    with pytest.raises(ValueError, match="shape"):
        k.reshape_and_cache(key[:, :, :32], val, kc, vc, slots)
    with pytest.raises(TypeError, match="dtype f32"):
        k.reshape_and_cache(key.astype(np.float32), val, kc, vc, slots)
    with pytest.raises(ValueError, match="shape"):
        k.reshape_and_cache(key, val, kc, vc, slots[:3])
    ro = kc.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        k.reshape_and_cache(key, val, ro, vc, slots)
    with pytest.raises(ValueError, match="contiguous"):
        k.reshape_and_cache(key, val, np.zeros(2 * kc.size, np.uint16)[::2],
                            vc, slots)
    with pytest.raises(ValueError, match="holds"):
        k.reshape_and_cache(key, val, kc, vc, slots, cache_bytes=(
            kc.nbytes + 2, vc.nbytes))
    with pytest.raises(TypeError, match="no argument"):
        k.reshape_and_cache(key, val, kc, vc, slots, scale=np.ones(1))


def test_per_call_checks_run_on_a_remembered_plan(ctx, monkeypatch):
    """What a plan cannot know is checked on each call: K and V caches
    that overlap (same shapes as a good call, so the same key), scalars
    out of their C type's range, values of query_start_loc / seq_lens (the
    launch rule's maxima when not given), and a closed context."""
    builds = Builds(monkeypatch)
    k = write_kernel(ctx)
    rng = np.random.default_rng(3)
    key, val, _, _, slots = write_args(rng, 4)
    ek, ev = LAY.extent_bytes("k", 4) // 2, LAY.extent_bytes("v", 4) // 2
    buf = np.zeros(ek + ev, np.uint16)
    k.reshape_and_cache(key, val, buf[:ek], buf[ek:], slots, num_blocks=4)
    n, before = builds.n, buf.copy()
    # V's view as long as before (the same key), starting where K does.
    with pytest.raises(ValueError, match="overlap"):
        k.reshape_and_cache(key, val, buf[:ek], buf[:ev], slots,
                            num_blocks=4)
    assert builds.n == n, "the overlap was found on the remembered plan"
    np.testing.assert_array_equal(buf, before)
    a = attention_kernel(ctx)
    q, out, kc, vc, table, lens, qsl = attention_args(rng, [40, 3])
    args, _ = a.prepare(q, out, kc, vc, table, lens, qsl, softmax_scale=0.5)
    assert (args.max_seq_len, args.max_query_len) == (40, 1)
    n = builds.n
    args, _ = a.prepare(q, out, kc, vc, table, np.array([9, 60], np.int32),
                        qsl, softmax_scale=0.25)
    assert (args.max_seq_len, args.softmax_scale) == (60, 0.25)
    assert builds.n == n
    with pytest.raises(kvgen.KvgenError, match="exceeds num_tokens"):
        a.prepare(q, out, kc, vc, table, lens,
                  np.array([0, 1, 1 << 30], np.int32), softmax_scale=0.5)
    kw = dict(softmax_scale=0.5, max_query_len=1, max_seq_len=40,
              sliding_window=0)
    a.prepare(q, out, kc, vc, table, lens, qsl, **kw)
    n = builds.n
    for field, bad in (("sliding_window", 2**64 + 3),
                       ("max_seq_len", -(2**63) - 1)):
        with pytest.raises(ValueError, match=field):
            a.prepare(q, out, kc, vc, table, lens, qsl,
                      **{**kw, field: bad})
    with pytest.raises(ValueError, match="half"):
        a.prepare(q, out, kc, vc, table, lens, qsl,
                  **{**kw, "softmax_scale": "half"})
    with pytest.raises(kvgen.KvgenError, match="max_query_len"):
        a.paged_attention(q, out, kc, vc, table, lens, qsl,
                          **{**kw, "max_query_len": 5})
    assert builds.n == n + 1, "only the str softmax_scale was a new key"
    assert not out.any()


def test_launch_on_a_closed_context_is_refused(kvgen_cli, tmp_path,
                                              kernel_cache):
    """A kernel kept past its Context's close() raised only after it had
    launched through the destroyed handle (a remembered plan made that a
    bare C call): ValueError before any C call."""
    lf = tmp_path / "l.mlir"
    lf.write_text(f"#kv.layout<{LAY.text}>\n")
    subprocess.run([str(KVGEN), "emit", "--layout", str(lf), "--target",
                    "host", "--op", "reshape_and_cache", "--io", "bf16",
                    "--bundle", str(tmp_path / "b")], check=True,
                   capture_output=True)
    c = kvgen.Context("host", cache_dir=kernel_cache)
    c.load_bundle(str(tmp_path / "b"))
    k = write_kernel(c)
    args = write_args(np.random.default_rng(4), 3)
    k.reshape_and_cache(*args)
    c.close()
    with pytest.raises(ValueError, match="closed"):
        k.reshape_and_cache(*args)


def test_a_plan_fills_what_a_fresh_check_fills(ctx):
    """The argument struct of a remembered plan equals, byte for byte, the
    one a fresh check fills, over random shapes, strides, keywords and
    scalars (the workspace included: the kernel's own, per stream)."""
    rng = np.random.default_rng(5)
    w, a = write_kernel(ctx), attention_kernel(ctx)
    calls = []
    for i in range(12):
        T = int(rng.integers(0, 9))
        key, val, kc, vc, slots = write_args(rng, T)
        if i % 3 == 1:  # a strided token dim
            key = np.zeros((T, 3, 64), np.uint16)[:, :2]
        kw = dict(num_blocks=int(rng.integers(1, 5))) if i % 2 else {}
        calls.append((w, (key, val, kc, vc, slots), kw))
        lens = [int(x) for x in rng.integers(0, 64, int(rng.integers(1, 4)))]
        args = attention_args(rng, lens)
        kw = dict(softmax_scale=float(rng.uniform(0.1, 1)))
        if i % 2:
            kw.update(max_query_len=1, max_seq_len=max(lens),
                      sliding_window=int(rng.integers(0, 20)))
        calls.append((a, args, kw))
    for _ in range(2):  # the second pass: every plan remembered
        for k, args, kw in calls:
            got, s = k.prepare(*args, **kw)
            k._plans.clear()
            want, s2 = k.prepare(*args, **kw)
            assert bytes(got) == bytes(want) and s == s2
            k.prepare(*args, **kw)  # remember it again


def test_foreign_byte_order_and_object_arrays_are_refused(ctx):
    """Review of issue 24: _Buf took a numpy array's dtype by its name
    only, so a big-endian array ('>i8' slots, '>u2' rows) of the same name
    as the kernel's dtype was accepted and read byte-swapped (wrong slots
    and rows, on a first call and through a plan alike), and an object
    array (pointers to Python objects) was accepted as a raw cache buffer:
    the kernel wrote bf16 bits over the pointers and the process crashed
    when they were next used. Both raise TypeError naming the argument,
    after a plan for good arrays of the same shapes exists, and nothing is
    written."""
    k = write_kernel(ctx)
    rng = np.random.default_rng(7)
    key, val, kc, vc, slots = write_args(rng, 4)
    k.reshape_and_cache(key, val, kc, vc, slots)  # a plan for these shapes
    kc[:] = 0
    vc[:] = 0
    for args, name in (
            ((key, val, kc, vc, slots.astype(">i8")), "slot_mapping"),
            ((key.astype(">u2"), val, kc, vc, slots), "key"),
            ((key, val.astype(">u2"), kc, vc, slots), "value")):
        with pytest.raises(TypeError, match=f"{name}: .*byte order"):
            k.reshape_and_cache(*args)
    assert not kc.any() and not vc.any()
    # Object caches (of the byte size of the real ones); the slots are
    # negative so that a launch, were it made, writes nothing.
    okc = np.zeros(kc.nbytes // 8, dtype=object)
    none = np.full(4, -1, np.int64)
    with pytest.raises(TypeError, match="key_cache: .*Python objects"):
        k.reshape_and_cache(key, val, okc, vc, none)
    assert all(x == 0 for x in okc)


def test_plans_per_kernel_are_bounded(ctx):
    k = write_kernel(ctx)
    k._plans.clear()
    rng = np.random.default_rng(6)
    for T in range(kvgen._PLAN_LIMIT + 10):
        key, val, kc, vc, _ = write_args(rng, 0, nb=1)
        k.prepare(np.zeros((T, 2, 64), np.uint16),
                  np.zeros((T, 2, 32), np.uint16), kc, vc,
                  np.full(T, -1, np.int64))
    assert len(k._plans) == kvgen._PLAN_LIMIT


def test_overhead_benchmark_runs(kvgen_cli):
    """bench/binding_overhead.py (it prints the host time per call; no time
    is asserted) runs to the end with a few calls per round."""
    gen = BUILD / "lib" / "libkvgen-generator.so"
    if not gen.is_file():
        pytest.skip(f"{gen} not built (the bench JIT-compiles its kernels)")
    env = dict(os.environ, KVGEN_GENERATOR=str(gen))
    env.setdefault("KVGEN_LIB", str(BUILD / "lib" / "libkvgen-runtime.so"))
    r = subprocess.run([sys.executable, str(REPO / "bench" /
                                            "binding_overhead.py"),
                        "-n", "5", "-r", "1", "--cache-dir",
                        str(BUILD / "test-plans-cache")],
                       capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(re.findall(r"^  prepare +[0-9.]+ us", r.stdout, re.M)) == 3, \
        r.stdout
