"""Writes an op holding a `#kv.layout` too large in one way to stdout
(`"test.op"() {l = #kv.layout<...>}`, for kvgen-opt
--allow-unregistered-dialect), for the tests of the grammar's bounds
(layout-hostile-text.test):

    hostile-layout.py components N   N named components, one per line
    hostile-layout.py strides N      N `<name>_strides` fields, one per line
    hostile-layout.py stride-list N  a stride list of N entries, one per line
    hostile-layout.py digits N       num_kv_heads an N-digit literal
    hostile-layout.py plan-digits N  a #kv.rows_plan whose threads has N digits
    hostile-layout.py qheads-digits N  kv.paged_attention, num_q_heads of
                                     N digits (the op, not a "test.op")

Each is about N lines (or N digits) of text: its error must come promptly,
not after work that grows with N.
"""
import sys

kind, n = sys.argv[1], int(sys.argv[2])
head = "#kv.layout<num_kv_heads = 1, block_size = 16, dtype = bf16,\n"
if kind == "components":
    body = "components = [\n" + ",\n".join(f"c{i}: 8" for i in range(n)) + "]"
elif kind == "strides":
    body = ("components = [c0: 8],\n" +
            ",\n".join(f"c{i}_strides = [?, ?, ?]" for i in range(n)))
elif kind == "stride-list":
    body = ("components = [c0: 8],\nc0_strides = [\n" +
            ",\n".join("1" for _ in range(n)) + "]")
elif kind == "digits":
    head = "#kv.layout<num_kv_heads = " + "1" * n + ",\n"
    body = "block_size = 16, dtype = bf16, head_size_k = 8, head_size_v = 8"
elif kind == "plan-digits":
    sys.stdout.write(
        '"test.op"() {p = #kv.rows_plan<target = "sm_90", vector_bytes = 16,\n'
        "threads = " + "1" * n + ", tokens_per_cta = 1, small_max_tokens = 0,"
        " small_threads = 0, cache_alignment = proven, hw_fp8 = false,"
        " streaming_stores = false>} : () -> ()\n")
    sys.exit(0)
elif kind == "qheads-digits":
    sys.stdout.write(
        "kv.paged_attention @a : #kv.layout<num_kv_heads = 4,\n"
        "head_size_k = 128, head_size_v = 128, block_size = 16, dtype = bf16>,"
        "\nquery bf16, num_q_heads " + "1" * n + "\n")
    sys.exit(0)
else:
    sys.exit(f"unknown kind '{kind}'")
sys.stdout.write('"test.op"() {l = ' + head + body + ">} : () -> ()\n")
