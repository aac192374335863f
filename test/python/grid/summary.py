"""The grid's summary: passed / failed / skipped per backend and case
group, after pytest's own. A plugin that test/python/conftest.py registers
(not a hook of grid/conftest.py: under pytest-xdist the process that prints
the summary, the controller, collects no items and so never loads that
conftest). It reads each report's "kvgen_grid_group" user property, which
grid/conftest.py gives every grid item; reports carry their user properties
from the xdist workers to the controller.
"""

GROUP_PROP = "kvgen_grid_group"
_results = {}  # (backend, group) -> [passed, failed, skipped]


def pytest_runtest_logreport(report):
    g = next((tuple(v.split("/", 1)) for k, v in report.user_properties
              if k == GROUP_PROP), None)
    if g is None:
        return
    if report.when == "call" or (report.when == "setup" and
                                 not report.passed):
        r = _results.setdefault(g, [0, 0, 0])
        r[0 if report.passed else 2 if report.skipped else 1] += 1


def pytest_terminal_summary(terminalreporter):
    if not _results:
        return
    tr = terminalreporter
    tr.section("kvgen grid")
    tr.write_line(f"{'backend':8s} {'group':18s} {'passed':>6s} "
                  f"{'failed':>6s} {'skipped':>7s}")
    tot = {}
    for (b, g), (p, f, s) in sorted(_results.items()):
        tr.write_line(f"{b:8s} {g:18s} {p:6d} {f:6d} {s:7d}")
        t = tot.setdefault(b, [0, 0, 0])
        t[0] += p
        t[1] += f
        t[2] += s
    for b, (p, f, s) in sorted(tot.items()):
        tr.write_line(f"{b:8s} {'total':18s} {p:6d} {f:6d} {s:7d}")
