"""Which backends the grid runs on here: each one that cannot run (no GPU,
no torch, no bundle, no build) is reported as skipped with the reason; one
that can must give a working context of its kind and array back end."""

import numpy as np
import pytest

from grid import backends as B
from grid import conftest as G


@pytest.mark.parametrize("name", B.BACKENDS)
def test_backend_available(request, name):
    if name not in G.selected_backends(request.config):
        why = G.backend_status(request.config, name)
        pytest.skip(f"{name} backend: {why or 'not selected (--backend)'}")
    b = G.get_backend(request, name)
    assert b.name == name and b.ctx.backend == name
    # The array back end round-trips bytes through its memory.
    a = np.arange(300, dtype=np.uint8)
    x = b.X.upload(a)
    assert np.array_equal(b.X.download(x), a)
