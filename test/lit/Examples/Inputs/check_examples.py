"""Runs kvgen's tools over every example layout file.

Usage: check_examples.py EXAMPLES_DIR

For each *.mlir under EXAMPLES_DIR (sorted): kvgen-opt must accept it and
print it back so that it parses again, kv-plan must plan it for every target,
and it must hold at least one kv.reshape_and_cache and one kv.gather. Prints
one `PASS <file> write=<n> gather=<n>` line per file, or `FAIL <file>: ...`
and exits with 1. kvgen-opt is taken from PATH (lit puts the build's first).
"""
import os
import subprocess
import sys

TARGETS = ["gfx90a", "gfx942", "gfx950", "sm_80", "sm_90", "host"]


def run(args, stdin=None):
    proc = subprocess.run(args, input=stdin, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(" ".join(args) + ": " + proc.stderr.strip())
    return proc.stdout


def check(path):
    printed = run(["kvgen-opt", path])
    reparsed = run(["kvgen-opt", "-"], stdin=printed)
    if reparsed != printed:
        raise RuntimeError("printing is not stable")
    writes = printed.count("kv.reshape_and_cache @")
    gathers = printed.count("kv.gather @")
    if writes == 0 or gathers == 0:
        raise RuntimeError("needs a kv.reshape_and_cache and a kv.gather")
    for target in TARGETS:
        planned = run(["kvgen-opt", "--kv-plan=target=" + target, path])
        if planned.count("plan = #kv.rows_plan<") != writes + gathers:
            raise RuntimeError("kv-plan left an op unplanned for " + target)
    return writes, gathers


def main():
    root = sys.argv[1]
    files = sorted(f for f in os.listdir(root) if f.endswith(".mlir"))
    if not files:
        print("FAIL no .mlir files under " + root)
        return 1
    status = 0
    for name in files:
        try:
            writes, gathers = check(os.path.join(root, name))
            print("PASS %s write=%d gather=%d" % (name, writes, gathers))
        except RuntimeError as e:
            print("FAIL %s: %s" % (name, e))
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
