"""Fixtures of the grid harness (test/python/grid). For now: the binding
(python/kvgen) on sys.path, as the moved test modules expect."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))
