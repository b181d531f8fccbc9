"""Perturbations of the prose gates (tests/flows/test_prose.py): an issue number back in a comment, and a module
docstring grown past a tenth of the package (tests/falsification; format in perturbations_attnres.py)."""

from __future__ import annotations

_G = "tests/flows/test_prose.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "a_comment_cites_an_issue_number",
        "file": "dormouse/errors.py",
        "function": "<module>",
        "old": "from __future__ import annotations\n",
        "new": "from __future__ import annotations  # see iss" "ue 12\n",
        "gates": [_G + "test_no_code_or_test_cites_an_issue_number"],
        "why": "a comment points at a tracker the reader may not have instead of saying why: history leaks into "
               "the code, and the count of such comments grows unseen",
        "protects": "record",
    },
    {
        "name": "a_module_docstring_grows_past_the_density_bound",
        "file": "dormouse/errors.py",
        "function": "<module>",
        "old": "of ``error:``. Imports nothing from dormouse.",
        "new": "of ``error:``. Imports nothing from dormouse." + "\nA paragraph of prose." * 2000,
        "gates": [_G + "test_docstrings_are_at_most_a_tenth_of_the_package"],
        "why": "the docstrings outgrow the code they explain (2000 lines in one module): the density gate must "
               "see a module docstring, not only function ones",
        "protects": "record",
    },
]
