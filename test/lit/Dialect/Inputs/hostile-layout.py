"""Writes an op holding a `#kv.layout` too large in one way to stdout
(`"test.op"() {l = #kv.layout<...>}`, for kvgen-opt
--allow-unregistered-dialect), for the tests of the grammar's bounds
(layout-hostile-text.test):

    hostile-layout.py components N   N named components, one per line
    hostile-layout.py strides N      N `<name>_strides` fields, one per line
    hostile-layout.py stride-list N  a stride list of N entries, one per line
    hostile-layout.py digits N       num_kv_heads an N-digit literal

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
else:
    sys.exit(f"unknown kind '{kind}'")
sys.stdout.write('"test.op"() {l = ' + head + body + ">} : () -> ()\n")
