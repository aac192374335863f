"""The grid harness's fixtures (see README.md next to this file).

`backend` is parametrized over the selected backends (--backend): one
Backend per session and name, made when its first test runs, for the
kernels of every selected test of that backend (their `case` parameter's
kernels()). With --backend auto (the default) a backend that cannot run
here is left out and test_backends.py reports it as skipped, with the
reason; one named explicitly that cannot run is a usage error.

At the end, a summary per backend and case group (passed / failed;
summary.py, a plugin that test/python/conftest.py registers).
"""

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))

from grid import backends as B  # noqa: E402
# Each grid item's "backend/group", in its user_properties, for the summary.
from grid.summary import GROUP_PROP  # noqa: E402

_made = {}
_status = {}


class _Opts:
    def __init__(self, config):
        g = config.getoption
        self.backend = g("--backend")
        self.bundle = g("--bundle")
        self.device = g("--device")
        self.slack = g("--slack")
        self.max_tokens = g("--max-tokens")
        self.cache_dir = g("cache_dir")
        self.host_reference = g("--host-reference")


def options(config):
    if not hasattr(config, "_kvgen_grid_opts"):
        config._kvgen_grid_opts = _Opts(config)
    return config._kvgen_grid_opts


def backend_status(config, name):
    """None when backend `name` can run here, else why not."""
    if name not in _status:
        _status[name] = B.status(name, options(config))
    return _status[name]


def selected_backends(config):
    want = options(config).backend
    if want == "auto":
        return [n for n in B.BACKENDS if backend_status(config, n) is None]
    names = [n.strip() for n in want.split(",") if n.strip()]
    for n in names:
        why = backend_status(config, n)
        if why is not None:
            raise pytest.UsageError(f"--backend {n}: cannot run here: {why}")
    return names


def pytest_generate_tests(metafunc):
    if "backend" in metafunc.fixturenames:
        names = selected_backends(metafunc.config)
        only = metafunc.definition.get_closest_marker("backends")
        params = names
        if only is not None:  # @pytest.mark.backends("cuda"): those only
            params = [n for n in names if n in only.args] or [
                pytest.param(n, marks=pytest.mark.skip(
                    reason=f"{n} backend only, not selected here: " +
                    (backend_status(metafunc.config, n) or "--backend")))
                for n in only.args]
        metafunc.parametrize("backend", params, indirect=True,
                             scope="session")


def pytest_collection_modifyitems(config, items):
    mt = options(config).max_tokens
    keep, drop = [], []
    for it in items:
        p = getattr(it, "callspec", None)
        p = p.params if p else {}
        if mt is not None and "T" in p and p["T"] > mt:
            drop.append(it)
            continue
        only = getattr(p.get("case"), "backends", None)
        if only is not None and p.get("backend") not in only:
            drop.append(it)  # a case of other backends (cases.py)
            continue
        keep.append(it)
        if "case" in p and "backend" in p:
            group = getattr(it.module, "GRID_GROUP", None) or p["case"].group
            it.user_properties.append((GROUP_PROP, f"{p['backend']}/{group}"))
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _specs_for(session, name):
    seen = {}
    for it in session.items:
        p = getattr(it, "callspec", None)
        if not p or p.params.get("backend") != name:
            continue
        c = p.params.get("case")
        if c is not None:
            for k in c.kernels().values():
                seen[k] = None
    return list(seen)


def get_backend(request, name):
    """The session's Backend `name` (made on first use)."""
    if name not in _made:
        why = backend_status(request.config, name)
        if why is not None:
            pytest.skip(f"{name} backend: {why}")
        tr = request.config.pluginmanager.get_plugin("terminalreporter")

        def log(msg):
            if tr is not None:
                tr.write_line(msg)
        t0 = time.time()
        specs = _specs_for(request.session, name)
        work = request.getfixturevalue("tmp_path_factory").mktemp(
            f"grid-{name}")
        try:
            _made[name] = B.make(name, specs, options(request.config), work,
                                 log)
        except Exception as e:  # noqa: BLE001
            _made[name] = e
        log(f"grid {name} backend ready in {time.time() - t0:.1f} s")
    b = _made[name]
    if isinstance(b, Exception):
        raise b
    return b


@pytest.fixture(scope="session")
def backend(request):
    return get_backend(request, request.param)


def pytest_sessionfinish(session):
    for b in _made.values():
        if isinstance(b, B.Backend):
            b.close()
