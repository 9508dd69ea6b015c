"""The third-party servers' pins agree everywhere they are written: lock files, the helper, the docs.

No install needed: this reads files only (the servers themselves run in
tests/upstream/test_thirdparty_servers.py).
"""

from __future__ import annotations

import json
import re

import pytest

from tests.support.thirdparty import LOCKS, NPM_VERSIONS, PYPI_VERSIONS, REPO, TS_SDK, TS_SDKS

#: package.json's dependencies: the servers at exact versions, the SDK releases under their aliases.
MANIFEST = {**NPM_VERSIONS, **{alias: f"npm:{TS_SDK}@{version}" for version, alias in TS_SDKS.items()}}


def test_package_json_pins_exact_versions_and_the_lock_agrees():
    manifest = json.loads((LOCKS / "npm" / "package.json").read_text())
    assert manifest["dependencies"] == MANIFEST  # exact: no ^ or ~ ranges
    lock = json.loads((LOCKS / "npm" / "package-lock.json").read_text())
    assert lock["packages"][""]["dependencies"] == MANIFEST
    for package, version in [*NPM_VERSIONS.items(), *((a, v) for v, a in TS_SDKS.items())]:
        assert lock["packages"][f"node_modules/{package}"]["version"] == version
    # Every package below them is pinned too, with its integrity hash.
    for path, meta in lock["packages"].items():
        if path:
            assert meta.get("version"), path
            assert meta.get("integrity"), path


@pytest.mark.parametrize(("name", "version"), list(PYPI_VERSIONS.items()))
def test_each_pypi_servers_requirements_pin_every_package(name: str, version: str):
    lines = [
        ln.strip()
        for ln in (LOCKS / f"{name}.txt").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert f"{name}=={version}" in lines
    for line in lines:
        assert re.fullmatch(r"[A-Za-z0-9_.-]+==[A-Za-z0-9_.+-]+", line), line
    # Its own mcp, whatever agentd's is: that is why it gets a venv of its own.
    assert any(line.startswith("mcp==") for line in lines)


def test_the_docs_and_the_tests_name_the_versions_tested():
    # The set-up commands' page says what scripts/test installs; the servers' page has the table.
    setup = " ".join((REPO / "docs" / "getting-started.md").read_text().split())
    docs = (REPO / "docs" / "third-party-servers.md").read_text()
    tests = (REPO / "tests" / "upstream" / "test_thirdparty_servers.py").read_text()
    for package, version in [*NPM_VERSIONS.items(), *PYPI_VERSIONS.items()]:
        assert f"`{package}` {version}" in setup, (package, version)
        assert f"`{package}` | {version} |" in docs, (package, version)
        assert f"{package.rsplit('/', 1)[-1]} {version}" in tests, (package, version)
    for version in TS_SDKS:
        assert f"`{TS_SDK}` {version}" in setup, version
        assert f"`{TS_SDK}` | {version} |" in docs, version
        assert f"SDK {version}" in tests, version
