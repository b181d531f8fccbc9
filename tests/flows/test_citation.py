"""A researcher can use and cite what dormouse published: a permissive licence, the one the package metadata
names; a CITATION.cff that agrees with the package's version and says how to name a published comparison; and
the README's virtual environment kept out of git, where it would make every run's commit `+dirty`."""

from __future__ import annotations

import re
from fnmatch import fnmatch
from importlib.metadata import metadata
from pathlib import Path

import yaml

import dormouse

ROOT = Path(__file__).resolve().parents[2]


def test_the_licence_file_is_the_one_the_package_metadata_names() -> None:
    named = metadata("dormouse")["License"]  # pyproject.toml's, as the installed package states it
    assert named == "MIT" and (ROOT / "LICENSE").read_text().startswith("MIT License\n")


def test_the_citation_file_names_this_version_and_how_to_cite_a_comparison() -> None:
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software" and cff["title"] and cff["authors"]
    assert cff["license"] == "MIT" and str(cff["version"]) == dormouse.__version__
    for what in ("docs/results/NAME", "commit", "sha256"):  # the folder, the code and the registration
        assert what in cff["message"], what
    assert "CITATION.cff" in (ROOT / "README.md").read_text()


def test_the_readmes_virtual_environment_is_ignored_by_git() -> None:
    venv = re.search(r"-m venv (\S+)", (ROOT / "README.md").read_text())
    assert venv is not None, "the README no longer creates a virtual environment: drop this test"
    patterns = [line.strip().strip("/") for line in (ROOT / ".gitignore").read_text().splitlines()
                if line.strip() and not line.startswith(("#", "!"))]
    assert any(fnmatch(venv.group(1), pattern) for pattern in patterns), \
        f"{venv.group(1)}/ is not in .gitignore: every run would record a +dirty commit"
