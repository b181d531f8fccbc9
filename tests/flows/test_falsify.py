"""The falsification record's own tests (tests/falsification/): every perturbation is keyed to a definition
and applies; a pattern is searched only inside its definition, survives the definition moving, edits
elsewhere in the file and a change of indentation; a stale one says whether the definition or the pattern
is gone; the keying tool adds one line per perturbation and is idempotent; a real defect goes red and
restores green, and a harmless or stale perturbation is reported (exit 1), never counted as falsified."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the record is the package tests.falsification, imported from the repo root
    sys.path.insert(0, str(ROOT))

from tests.falsification import key as keytool  # noqa: E402
from tests.falsification import locate, record, runner  # noqa: E402
from tests.falsification.reads import fingerprint  # noqa: E402

GATE = "tests/arms/test_attnres.py::test_gold_fixture_a"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.falsification", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def test_every_perturbation_is_keyed_and_applies_exactly_once() -> None:
    """A perturbation that is unkeyed or stale is caught here, before the slow full run."""
    perts, errors = runner.load_perturbations()
    assert not errors, f"perturbation files that do not load (or lack a key): {errors}"
    assert {p["source"] for p in perts} >= {"perturbations_attnres.py"}
    stale = {p["name"]: why for p in perts if (why := runner.staleness(p))}
    assert not stale, f"stale perturbations: {stale}"



def test_every_perturbation_still_applies_when_its_pattern_also_occurs_elsewhere_in_its_file() -> None:
    """The record's own keys, against an edit elsewhere in each file that a file-wide rule would call stale:
    a copy of the pattern in a new constant at the top, and the original moved down by a new function. Whole-file
    and module-level keys are left out: the new constant is module-level code, so for them the copy is inside
    the keyed span by definition."""
    perts, _ = runner.load_perturbations()
    checked = 0
    for p in (p for p in perts if p["function"] not in (locate.WHOLE_FILE, locate.MODULE)):
        # the copy sits in a raw triple-quoted string, verbatim; a pattern that cannot close one is skipped
        quote = next((q for q in ('"""', "'''") if q not in p["old"] and not p["old"].endswith((q[0], "\\"))),
                     None)
        if quote is None:
            continue
        text = (ROOT / p["file"]).read_text()
        edited = f"_ELSEWHERE = r{quote}{p['old']}{quote}\n\n\ndef _new():\n    return 0\n\n\n" + text
        assert edited.count(p["old"]) == 2, p["name"]
        out = locate.apply(edited, p["function"], p["old"], p["new"], p["file"])
        assert out == edited.replace(text, text.replace(p["old"], p["new"])), p["name"]
        checked += 1
    assert checked >= 0.9 * len(perts), f"only {checked} of {len(perts)} perturbations checked"


SOURCE = '''\
import functools

LIMIT = 3


def helper(x):
    return x + 1


class Box:
    SIZE = 2

    @functools.cache
    def area(self, x):
        y = x * 2
        return y + 1

    def twice(self, x):
        y = x * 2
        return y
'''


def test_the_pattern_is_searched_only_inside_its_definition() -> None:
    """`y = x * 2` occurs in two methods: keyed to one, it applies there and nowhere else."""
    out = locate.apply(SOURCE, "Box.twice", "y = x * 2", "y = x * 3", "box.py")
    assert "    def twice(self, x):\n        y = x * 3\n" in out
    assert "    def area(self, x):\n        y = x * 2\n" in out
    with pytest.raises(locate.StalePerturbation, match="occurs 0 times"):
        locate.key_for(SOURCE, "no such text", "box.py")
    with pytest.raises(locate.StalePerturbation, match="occurs 2 times"):
        locate.key_for(SOURCE, "y = x * 2", "box.py")  # the old, file-wide rule cannot key it


def test_keys_name_functions_methods_decorators_and_constants() -> None:
    assert locate.key_for(SOURCE, "return y + 1", "box.py") == "Box.area"
    assert locate.key_for(SOURCE, "@functools.cache", "box.py") == "Box.area"  # decorators belong to it
    assert locate.key_for(SOURCE, "SIZE = 2", "box.py") == "Box.SIZE"
    assert locate.key_for(SOURCE, "LIMIT = 3", "box.py") == "LIMIT"
    assert locate.key_for(SOURCE, "return x + 1", "box.py") == "helper"
    assert locate.key_for(SOURCE, "import functools", "box.py") == locate.MODULE
    assert locate.key_for("a: 1\n", "a: 1", "c.yaml", python=False) == locate.WHOLE_FILE
    out = locate.apply(SOURCE, locate.MODULE, "import functools", "import functools  # x", "box.py")
    assert out.startswith("import functools  # x\n")


def test_a_moved_definition_and_edits_elsewhere_leave_the_perturbation_applicable() -> None:
    """The method moves to the top of its class, and the pattern now also occurs in a new function."""
    moved = SOURCE.replace("    def twice(self, x):\n        y = x * 2\n        return y\n", "")
    moved = moved.replace("class Box:\n", "def other(x):\n    y = x * 2\n    return y\n\n\nclass Box:\n"
                          "    def twice(self, x):\n        y = x * 2\n        return y\n\n")
    out = locate.apply(moved, "Box.twice", "y = x * 2", "y = x * 3", "box.py")
    assert "    def twice(self, x):\n        y = x * 3\n" in out and "def other(x):\n    y = x * 2\n" in out


def test_a_function_moved_into_a_class_is_matched_dedented_and_the_replacement_reindented() -> None:
    old = "    y = x * 2\n    return y\n"  # a two-line pattern written for a module-level function
    new = "    y = x * 2\n    return -y\n"
    top = "def scale(x):\n    y = x * 2\n    return y\n"
    assert locate.apply(top, "scale", old, new, "m.py") == "def scale(x):\n    y = x * 2\n    return -y\n"
    method = "class M:\n    def scale(self, x):\n        y = x * 2\n        return y\n"
    out = locate.apply(method, "M.scale", old, new, "m.py")
    assert out == "class M:\n    def scale(self, x):\n        y = x * 2\n        return -y\n"
    ast.parse(out)
    # and back out of the class: a pattern written for the method, applied to the module-level function
    assert locate.apply(top, "scale", "        return y\n", "        return -y\n", "m.py").endswith("    return -y\n")
    # a one-line pattern that gains lines: in the method, both lines land at the method's indentation
    out = locate.apply(method, "M.scale", "    y = x * 2\n", "    y = x * 2\n    y = -y\n", "m.py")
    assert "        y = x * 2\n        y = -y\n        return y\n" in out
    ast.parse(out)


def test_a_stale_perturbation_says_whether_the_definition_or_the_pattern_is_gone() -> None:
    renamed = SOURCE.replace("def twice(", "def double(")
    with pytest.raises(locate.StalePerturbation, match=r"no definition `Box.twice`.*occurs in `Box.double`"):
        locate.apply(renamed, "Box.twice", "return y\n", "return -y\n", "box.py")
    with pytest.raises(locate.StalePerturbation, match=r"no definition `gone`.*nowhere else"):
        locate.apply(SOURCE, "gone", "no such text", "", "box.py")
    with pytest.raises(locate.StalePerturbation, match=r"no longer occurs in `helper` \(box.py, lines 6-7\)"
                       r".*occurs in `Box.area`"):
        locate.apply(SOURCE, "helper", "return y + 1", "", "box.py")
    with pytest.raises(locate.StalePerturbation, match=r"occurs 2 times in `Box`"):
        locate.apply(SOURCE, "Box", "y = x * 2", "", "box.py")


OLD_FORMAT = '''\
"""A perturbation file in the old format."""

_F = "{target}"

PERTURBATIONS: list[dict] = [
    {{
        "name": "first",
        "file": _F,  # a comment the tool keeps
        "old": "return y + 1",
        "new": "return y - 1",
    }},
    # a comment between entries
    {{"name": "second", "file": _F, "old": "LIMIT = 3", "new": "LIMIT = 4"}},
]
'''


def test_the_keying_tool_adds_one_line_per_perturbation_and_is_idempotent(tmp_path: Path) -> None:
    target = tmp_path / "box.py"
    target.write_text(SOURCE)
    pfile = tmp_path / "perturbations_box.py"
    before = OLD_FORMAT.format(target=target)
    pfile.write_text(before)
    assert keytool.main([str(pfile)]) == 1  # check mode: unkeyed is a problem, nothing written
    assert pfile.read_text() == before
    assert keytool.main(["--write", str(pfile)]) == 0
    after = pfile.read_text()
    assert after == before.replace('        "file": _F,  # a comment the tool keeps\n',
                                   '        "file": _F,  # a comment the tool keeps\n'
                                   '        "function": "Box.area",\n').replace(
        '"file": _F, "old": "LIMIT = 3"', '"file": _F, "function": "LIMIT", "old": "LIMIT = 3"')
    assert keytool.main(["--write", str(pfile)]) == 0 and pfile.read_text() == after  # idempotent
    # a refactor renames the method: the key is stale until --rekey moves it
    target.write_text(SOURCE.replace("def area(", "def surface("))
    assert keytool.main(["--write", str(pfile)]) == 1 and pfile.read_text() == after
    assert keytool.main(["--write", "--rekey", str(pfile)]) == 0
    assert '"function": "Box.surface",' in pfile.read_text()


def test_falsify_goes_red_restores_green_and_records_what_its_red_run_read(tmp_path: Path) -> None:
    out, rec, md = tmp_path / "falsify.json", tmp_path / "record.json", tmp_path / "falsification.md"
    paths = ("--record-file", str(rec), "--markdown", str(md))
    proc = _run("--only", "temperature_1_over_sqrt_d", "--json", str(out), "--record", *paths)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (result,) = json.loads(out.read_text())["results"]
    assert result["status"] == "red", result
    assert result["gate"].startswith("tests/arms/test_attnres.py::test_gold_fixture_a"), result
    assert result["deviation"] and "bound" in result["deviation"], result  # "by how much" was parsed
    assert result["restored"] is True, result
    # the perturbed copy, not the editable install of the repo, is what the gate imported
    assert "/falsify-" in result["imports"]["dormouse.ops.attnres"], result["imports"]
    assert "temperature_1_over_sqrt_d" in proc.stdout  # the table was printed
    # what the red run opened, in repo paths (the tree's dormouse/conf is conf/): the perturbed module, the gate,
    # the conftest; nothing outside the repo, nothing the run wrote
    entry = record.load(rec)["temperature_1_over_sqrt_d"]
    assert {"dormouse/ops/attnres.py", "tests/arms/test_attnres.py", "tests/conftest.py"} <= set(entry["reads"])
    assert all((ROOT / f).is_file() for f in entry["reads"]), entry["reads"]
    assert "| `temperature_1_over_sqrt_d` (attnres) |" in md.read_text()
    # nothing it read has changed since: --changed runs nothing and says why
    again = _run("--only", "temperature_1_over_sqrt_d", "--changed", *paths)
    assert again.returncode == 0 and "1 of 1 perturbations read the same bytes" in again.stdout, again.stdout[-2000:]
    assert "running the other 0" in again.stdout, again.stdout[-2000:]


def test_the_fingerprint_moves_with_what_the_red_run_read_and_nothing_else(tmp_path: Path) -> None:
    """--changed re-runs a perturbation exactly when its fingerprint moves: a file its red run read, the
    perturbed file, the perturbation or torch changed; a file it never read may change freely."""
    (tmp_path / "pkg").mkdir()
    for name in ("read.py", "unread.py", "target.py"):
        (tmp_path / "pkg" / name).write_text(f"# {name}\n")
    pert = {"name": "p", "file": "pkg/target.py", "function": "f", "old": "a", "new": "b", "gates": ["t.py::t"]}
    env = {"torch": "2.13.0", "python": "3.11"}
    reads_ = ["pkg/read.py", "tests/gone.py"]  # a file that is gone counts as such

    def now() -> str:
        return fingerprint(pert, reads_, record.current_bytes(tmp_path), env)

    base = now()
    assert record.up_to_date(pert, {"reads": reads_, "fingerprint": base}, tmp_path, env)
    (tmp_path / "pkg" / "unread.py").write_text("# edited\n")
    assert now() == base
    (tmp_path / "pkg" / "read.py").write_text("# edited\n")
    assert now() != base
    assert not record.up_to_date(pert, {"reads": reads_, "fingerprint": base}, tmp_path, env)
    (tmp_path / "pkg" / "read.py").write_text("# read.py\n")
    assert now() == base
    (tmp_path / "pkg" / "target.py").write_text("# edited\n")
    assert now() != base
    (tmp_path / "pkg" / "target.py").write_text("# target.py\n")
    assert fingerprint({**pert, "new": "c"}, reads_, record.current_bytes(tmp_path), env) != base
    assert fingerprint(pert, reads_, record.current_bytes(tmp_path), {**env, "torch": "2.14.1"}) != base
    assert not record.up_to_date(pert, None, tmp_path, env)  # no record: it runs


def test_the_record_keeps_only_red_restored_runs_of_perturbations_that_still_exist() -> None:
    def res(name: str, status: str, restored: bool | None) -> dict[str, object]:
        return {"name": name, "status": status, "restored": restored, "fingerprint": "f", "reads": [], "imports": {}}

    old = {name: res(name, "red", True) for name in ("kept", "now_survives", "not_restored", "deleted")}
    new = record.merge(old, [res("now_survives", "survived", True), res("not_restored", "red", False),
                             res("added", "red", True)], {"kept", "now_survives", "not_restored", "added"})
    assert sorted(new) == ["added", "kept"]
    assert "imports" not in new["added"]


def test_falsify_reports_harmless_and_stale_perturbations(tmp_path: Path) -> None:
    base = {"file": "dormouse/ops/attnres.py", "new": "", "gates": [GATE], "protects": "mechanism"}
    perts = [
        {  # changes a comment only: every gate stays green, so it falsifies nothing
            **base, "name": "comment_only", "function": "_SoftmaxMix.forward",
            "old": "# Eq. 4: the weights act on the RAW values", "new": "# (a comment changed)", "why": "a no-op",
        },
        {**base, "name": "pattern_gone", "function": "_SoftmaxMix.forward", "old": "this text is not in the file",
         "why": "stale"},
        {**base, "name": "function_gone", "function": "no_such_function", "old": "x", "why": "stale"},
    ]
    pfile = tmp_path / "perturbations_test.py"
    pfile.write_text(f"PERTURBATIONS = {perts!r}\n")
    listed = _run("--list", "--file", str(pfile))
    assert listed.returncode == 1 and "1 apply, 2 stale" in listed.stdout, listed.stdout[-3000:]
    out = tmp_path / "falsify.json"
    proc = _run("--file", str(pfile), "--json", str(out))
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    status = {r["name"]: r for r in json.loads(out.read_text())["results"]}
    assert status["comment_only"]["status"] == "survived", status["comment_only"]
    assert status["comment_only"]["restored"] is True, status["comment_only"]
    assert status["pattern_gone"]["status"] == "stale", status["pattern_gone"]
    assert "no longer occurs in `_SoftmaxMix.forward`" in status["pattern_gone"]["detail"]
    assert status["function_gone"]["status"] == "stale", status["function_gone"]
    assert "no definition `no_such_function`" in status["function_gone"]["detail"]


def test_an_unkeyed_perturbation_or_one_without_protects_is_a_load_error_and_the_record_is_grouped(
    tmp_path: Path,
) -> None:
    base = {"name": "x", "file": "dormouse/ops/attnres.py", "old": "a", "new": "b", "gates": ["tests/t.py::t"],
            "why": "w", "function": "f"}
    unkeyed = {k: v for k, v in base.items() if k != "function"} | {"name": "z", "protects": "mechanism"}
    pfile = tmp_path / "perturbations_t.py"
    pfile.write_text(f"PERTURBATIONS = {[base, {**base, 'name': 'y', 'protects': 'vibes'}, unkeyed]!r}\n")
    perts, errors = runner.load_perturbations([pfile])
    assert perts == [] and len(errors) == 3, errors
    assert "missing ['protects']" in errors[0] and "protects='vibes' is not one of" in errors[1], errors
    assert "missing ['function']" in errors[2] and "tests.falsification.key --write" in errors[2], errors
    results = [runner.Result("k1", "f", "g", "why k1", "perturbations_k.py", ["g"], "kernels", status="red",
                             gate="tests/test_k.py::t", deviation="2 (bound 1), 2x", restored=True),
               runner.Result("m1", "f", "g", "why m1", "perturbations_m.py", ["g"], "mechanism", status="survived",
                             detail="every gate stayed green", restored=True)]
    md = runner.render_markdown(results, 2, 3.0, "python -m tests.falsification", 1, "2026-12-01", [])
    assert md.index("## Mechanism") < md.index("## Kernels")  # the PROTECTS order, not the run order
    assert "| `k1` (k) | why k1 | `test_k.py::t` | 2 (bound 1), 2x | yes | - |" in md
    assert "| `m1` (m) | why m1 | **SURVIVED** | every gate stayed green | yes | - |" in md
    assert "| mechanism | 1 | 0 | 1 |" in md and "exit status 1" in md
