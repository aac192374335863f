"""Runs a command, echoes its stdout and stderr (merged) and then its exit
status as `exit status: N`; always exits 0, so lit tests can FileCheck exact
exit statuses (`not` only tells zero from non-zero).

    %python %S/Inputs/exit-status.py kvgen emit ... | FileCheck %s
"""
import subprocess
import sys

r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE,
                   stderr=subprocess.STDOUT)
sys.stdout.buffer.write(r.stdout)
print(f"exit status: {r.returncode}")
