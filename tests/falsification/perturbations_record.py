"""Perturbations of the falsification record itself: what a red run read, its fingerprint, and the merge that
decides what ``--changed`` (CI) re-runs (tests/falsification/reads.py, record.py; format in
perturbations_attnres.py). A defect here lets CI skip a perturbation that a change has turned green."""

from __future__ import annotations

_T = "tests/flows/test_falsify.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "fingerprint_ignores_file_contents",
        "file": "tests/falsification/reads.py",
        "function": "fingerprint",
        "old": 'digest = "missing" if data is None else hashlib.sha256(data).hexdigest()',
        "new": 'digest = "missing" if data is None else "present"',
        "gates": [_T + "test_the_fingerprint_moves_with_what_the_red_run_read_and_nothing_else"],
        "why": "the fingerprint hashes which files were read, not what they hold: an edit that turns a gate green "
               "leaves the fingerprint as recorded, and CI never re-runs the perturbation",
        "protects": "record",
    },
    {
        "name": "changed_trusts_any_recorded_entry",
        "file": "tests/falsification/record.py",
        "function": "up_to_date",
        "old": '    return fingerprint(perturbation, entry["reads"], current_bytes(root), env) == entry["fingerprint"]',
        "new": "    return True",
        "gates": [_T + "test_the_fingerprint_moves_with_what_the_red_run_read_and_nothing_else"],
        "why": "--changed skips every perturbation with a record, whatever changed since its red run",
        "protects": "record",
    },
    {
        "name": "reads_miss_the_imported_modules",
        "file": "tests/falsification/reads.py",
        "function": "SITECUSTOMIZE",
        "old": "        if path.startswith(_PREFIX) and path not in _SEEN:",
        "new": "        if path.startswith(_PREFIX) and path not in _SEEN and not path.endswith('.py'):",
        "gates": [_T + "test_falsify_goes_red_restores_green_and_records_what_its_red_run_read"],
        "why": "the read set leaves out the Python modules the gate imported (imports open files through "
               "io.open_code): an edit to the module under test changes no fingerprint but the perturbed file's",
        "protects": "record",
    },
    {
        "name": "record_keeps_an_entry_that_no_longer_goes_red",
        "file": "tests/falsification/record.py",
        "function": "merge",
        "old": "            out.pop(r[\"name\"], None)",
        "new": "            pass",
        "gates": [_T + "test_the_record_keeps_only_red_restored_runs_of_perturbations_that_still_exist"],
        "why": "a perturbation that survived or did not restore keeps its old red entry: the next --changed run "
               "finds its fingerprint current and never tries it again",
        "protects": "record",
    },
]
