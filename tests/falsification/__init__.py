"""The falsification record: part of the test suite (a gate must be able to go red).

- ``perturbations_*.py``: the named defects, each keyed to the definition it perturbs (``file`` +
  ``function``) and a pattern inside it (``old`` -> ``new``), with the gates it must turn red;
- ``runner.py`` (``python -m tests.falsification``): applies each to a temporary copy of the package and
  records which gate went red, by how much, and that the unperturbed copy restores green;
- ``locate.py``: where a perturbation applies (``ast``), and why it is stale when it no longer does;
- ``key.py`` (``python -m tests.falsification.key``): computes the ``function`` key of perturbations that
  lack it, from their text patch, and verifies the existing keys.

pytest does not collect these modules (none is named ``test_*.py``); their own tests are
tests/flows/test_falsify.py.
"""
