"""Perturbations of what lets a researcher use and cite a result: the licence, the citation file, the ignored
virtual environment (tests/falsification; format in perturbations_verdict.py)."""

_G = "tests/flows/test_citation.py::"

PERTURBATIONS = [
    {
        "name": "licence_file_disagrees_with_the_metadata",
        "file": "LICENSE",
        "function": "<file>",
        "old": "MIT License\n",
        "new": "Apache License\n",
        "gates": [_G + "test_the_licence_file_is_the_one_the_package_metadata_names"],
        "why": "the licence file and the package metadata name different licences: a lab cannot tell which "
               "terms it may use the code under",
        "protects": "record",
    },
    {
        "name": "citation_names_another_version",
        "file": "CITATION.cff",
        "function": "<file>",
        "old": "version: 0.1.0\n",
        "new": "version: 0.0.9\n",
        "gates": [_G + "test_the_citation_file_names_this_version_and_how_to_cite_a_comparison"],
        "why": "a citation names a version of the software other than the one that produced the result",
        "protects": "record",
    },
    {
        "name": "readme_venv_not_ignored",
        "file": ".gitignore",
        "function": "<file>",
        "old": ".venv/\n",
        "new": "",
        "gates": [_G + "test_the_readmes_virtual_environment_is_ignored_by_git"],
        "why": "the virtual environment the README creates in the checkout is untracked content: every run's "
               "provenance and fingerprint record a +dirty commit",
        "protects": "record",
    },
]
