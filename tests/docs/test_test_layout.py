"""The tests' folders are the subjects of rfcs/0360: docs/testing.md, scripts/retest.py and the tree agree."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
#: Folders beside the subjects that hold no tests.
HELPERS = {"support", "mcpservers", "fakes", "thirdparty", "faults"}


def retest() -> ModuleType:
    spec = importlib.util.spec_from_file_location("retest", REPO / "scripts" / "retest.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("retest", module)
    spec.loader.exec_module(module)
    return module


def test_every_test_module_is_in_a_subject_folder_that_is_a_package() -> None:
    subjects = set(retest().SUBJECTS)
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        parts = path.relative_to(REPO / "tests").parts
        where = f"{path.relative_to(REPO)} is not in a subject folder: move it with python scripts/retest.py"
        assert len(parts) == 2, where
        assert parts[0] in subjects, where
    for subject in subjects:
        assert (REPO / "tests" / subject / "__init__.py").is_file(), f"tests/{subject}/ has no __init__.py"


def test_the_folders_are_the_subjects_and_docs_testing_lists_each() -> None:
    subjects = set(retest().SUBJECTS)
    folders = {p.name for p in (REPO / "tests").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders - HELPERS == subjects
    table = set(
        re.findall(r"^\| `tests/(\w+)/` \|", (REPO / "docs" / "testing.md").read_text(), re.MULTILINE)
    )
    assert table == subjects


def test_the_fault_catalog_names_only_test_files_that_exist() -> None:
    readme = (REPO / "tests" / "faults" / "README.md").read_text()
    named = set(re.findall(r"tests/[\w/]+\.py", readme))
    missing = sorted(n for n in named if not (REPO / n).is_file())
    assert not missing, f"tests/faults/README.md names files that do not exist: {missing}"


def test_every_module_of_the_old_table_is_placed_by_the_table_not_the_fallback() -> None:
    """A new path of the table exists, so a re-run after a merge moves only what the merge added."""
    missing = sorted(new for new in retest().MAPPING.values() if not (REPO / new).is_file())
    assert not missing, f"scripts/retest.py maps to files that do not exist: {missing}"
