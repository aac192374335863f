"""Shared fixtures for kvgen's Python tests.

KVGEN_BUILD_DIR selects the build tree whose bin/ holds kvgen-translate
(default: <repo>/build).
"""

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def kvgen_build_dir() -> Path:
    return Path(os.environ.get("KVGEN_BUILD_DIR", REPO_ROOT / "build"))


@pytest.fixture(scope="session")
def kvgen_translate() -> Path:
    tool = kvgen_build_dir() / "bin" / "kvgen-translate"
    if not (tool.is_file() and os.access(tool, os.X_OK)):
        pytest.skip(f"kvgen-translate not found at {tool} "
                    "(build kvgen or set KVGEN_BUILD_DIR)")
    return tool


@pytest.fixture(scope="session")
def kvgen_session_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kvgen")
