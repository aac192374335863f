"""kvgen's grid harness: one case list (cases.py), run on every backend
(host in CI, cuda on a GPU) by the test modules here; see README.md."""


def case_params(cases):
    """pytest params (case, T) of a case list: ids NAME-TN; the items of
    the memcheck subset carry the memcheck marker."""
    import pytest
    out = []
    for c in cases:
        for T, mc in c.params():
            out.append(pytest.param(c, T, id=f"{c.name}-T{T}",
                                    marks=[pytest.mark.memcheck] if mc
                                    else []))
    return out
