"""What a comparison directory is bound to: its registration (``registration.json``: the hash of the file's exact
bytes plus the CLI overrides) and the fingerprint of the code computing its runs (docs/ab-protocol.md, "Running a
comparison"), and the design card simulated for that registration (``design.json``). ``--restart`` discards the
runs and starts over; protocol 1 is read only."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from dormouse.ab.comparison import fingerprint
from dormouse.ab.comparison.plan import ComparisonPlan
from dormouse.ab.comparison.registry import PROTOCOL, ComparisonError, Registered
from dormouse.ab.rule.sequential import DesignCard, design_card
from dormouse.ab.runs.job import recorded_fingerprints
from dormouse.arms.plugins import combined_sha256, plugin_of_module
from dormouse.run.checkpoint import atomic_write_text
from dormouse.run.files import DESIGN, LOCK, REGISTRATION, ComparisonFiles
from dormouse.run.lock import is_locked

STAMP_NAME = REGISTRATION


def registration_hash(reg: Registered, overrides: list[str]) -> str:
    """What a comparison is bound to: the registered file's exact bytes and the CLI overrides, in order."""
    blob = json.dumps({"file_sha256": reg.sha256, "overrides": list(overrides)}, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def refuse_protocol_1(reg: Registered) -> None:
    """Protocol 1 is read only: its published result stays checkable, but nothing new runs under it."""
    if reg.protocol != PROTOCOL:
        raise ComparisonError([
            f"{reg.source} is a protocol-{reg.protocol} registration, kept read only so its published result "
            "stays checkable: its margin 2·sd(A/A) does not shrink with seeds, so an effect below it could never "
            f"be called better. Register a protocol-{PROTOCOL} comparison (sesoi, looks, seed streams: "
            "docs/ab-protocol.md) to run it"])


def _stamp(reg: Registered, overrides: list[str]) -> dict[str, Any]:
    return {
        "name": reg.spec.name,
        "source": reg.source,
        "sha256": reg.sha256,
        "overrides": list(overrides),
        "hash": registration_hash(reg, overrides),
        "created": datetime.now().isoformat(timespec="seconds"),
        "registered": reg.text,
    }


def busy_runs(comp_dir: Path) -> list[str]:
    """The runs in the directory another process is still training (their run locks are held)."""
    return [p.name[: -len(".lock")] for p in ComparisonFiles(comp_dir).run_locks.glob("*.lock") if is_locked(p)]


def refuse_busy(busy: list[str], argument: str) -> None:
    """--restart must not delete a run another process is still training."""
    if busy:
        raise ComparisonError([f"--restart: run(s) {', '.join(busy)} are still being trained by another "
                               f"process (see `dormouse ab status {argument}`); stop them first"])


def _discard(comp_dir: Path, name: str, console: Console) -> None:
    """--restart: empty the directory (but the lock held here), refusing while another process trains a run."""
    refuse_busy(busy_runs(comp_dir), name)
    console.print(f"[yellow]--restart:[/] discarding {comp_dir}")
    for entry in comp_dir.iterdir():
        if entry.name == LOCK:  # this process holds it
            continue
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def read_stamp(comp_dir: Path) -> dict[str, Any] | None:
    path = ComparisonFiles(comp_dir).registration
    return json.loads(path.read_text()) if path.is_file() else None


def bind_registration(comp_dir: Path, reg: Registered, overrides: list[str], restart: bool,
                      console: Console) -> dict[str, Any]:
    """Bind the comparison directory to this registration, or refuse. Returns the stamp in force."""
    new = _stamp(reg, overrides)
    if comp_dir.exists() and restart:
        _discard(comp_dir, reg.argument, console)
    old = read_stamp(comp_dir)
    if old is not None:
        if old.get("hash") == new["hash"]:
            return old
        lines = [f"{comp_dir} was started under another registration; refusing to mix results."]
        if old.get("sha256") != new["sha256"]:
            lines.append(f"the registered file {reg.source} changed since the first run "
                         f"(sha256 {str(old.get('sha256'))[:12]} -> {new['sha256'][:12]})")
        if old.get("overrides") != new["overrides"]:
            lines.append(f"the CLI overrides changed: {old.get('overrides')} -> {new['overrides']}")
        lines.append("rerun with the original file and overrides to continue, or pass --restart to discard "
                     f"the runs in {comp_dir} and start over")
        raise ComparisonError(lines)
    if comp_dir.exists() and any(e.name not in (LOCK, DESIGN) for e in comp_dir.iterdir()):
        raise ComparisonError([f"{comp_dir} holds files but no {STAMP_NAME}: it is not a comparison this "
                               "tool started; pass --restart to discard it, or choose another --root"])
    comp_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(ComparisonFiles(comp_dir).registration, json.dumps(new, indent=2) + "\n")
    return new


def registration_state(comp_dir: Path, reg: Registered, overrides: list[str]) -> str:
    """What a run would do with the directory's stamp (``ab plan``): start, continue, or be refused."""
    old = read_stamp(comp_dir)
    if old is None:
        return "new comparison (nothing run yet)"
    if old.get("hash") == registration_hash(reg, overrides):
        return f"continues {comp_dir} (same registered file and CLI overrides)"
    return (f"DIFFERS from the one {comp_dir} was started with: a run would be refused (pass the original "
            "overrides, or --restart to discard the runs)")


def check_same_code(plan: ComparisonPlan, code: fingerprint.Fingerprint) -> None:
    """Refuse to add runs computed by other code than the comparison's runs so far, from the fingerprint every
    started run recorded (dormouse/ab/runs/job.py)."""
    differing: dict[str, fingerprint.Fingerprint | None] = {}  # run -> the fingerprint it recorded
    for run in plan.all_runs:
        if not run.run_dir.exists():
            continue
        for rec in recorded_fingerprints(plan.comp_dir, run.name) or [None]:
            old = fingerprint.Fingerprint.from_dict(rec) if rec else None
            if old is None or old.sha256 != code.sha256:
                differing[run.name] = old
    if not differing:
        return
    names = list(differing)
    old = differing[names[0]]
    what = ([f"commit {old.commit} -> {code.commit}", *fingerprint.differences(old, code)] if old else
            ["it recorded no code fingerprint (no attempt record)"])
    raise ComparisonError([
        f"{plan.comp_dir}: {len(names)} run(s) ({', '.join(names[:4])}{' …' if len(names) > 4 else ''}) were "
        f"computed by other code than this checkout (fingerprint {code.sha256[:12]}, commit {code.commit}); a "
        "comparison runs on one version of the code that computes it, so no run is added",
        f"what differs for {names[0]}: " + "; ".join(what),
        "to continue, " + "; and ".join(_ways_back(old, code)) + "; or, to run this code, register a new "
        "comparison (the registration under another `name`), or pass --restart to start over here (it discards "
        "the comparison's runs)"])


def _ways_back(old: fingerprint.Fingerprint | None, code: fingerprint.Fingerprint) -> list[str]:
    """How to get back to the code ``old`` recorded: dormouse's commit from git; a plugin's source, which may lie
    outside any repository, by its sha256 (docs/arms.md says how to check one)."""
    commit = old.commit if old else "unknown"
    ways = []
    if old is None or fingerprint.dormouse_changed(old, code):
        ways.append(f"run it from the code those runs used (commit {commit}, e.g. `git worktree add /tmp/ab "
                    f"{commit.split('+')[0]}`, with the same uncommitted edits if it was dirty)")
    then, now = (fingerprint.plugin_sources(old) if old else {}), fingerprint.plugin_sources(code)
    for module in fingerprint.changed_plugins(old, code) if old else []:
        if module not in then:
            ways.append(f"stop loading plugin {module}: those runs ran without it")
        else:
            where = plugin_of_module(module)
            ways.append(f"restore plugin {module}'s source{f' ({where.file})' if where else ''} to the one those "
                        f"runs used, whose sha256 is {combined_sha256(module, then[module])} (docs/arms.md: how to "
                        "check a plugin's sha256), e.g. from your own version control"
                        + ("" if module in now else ", and load it"))
    return ways


# The design card (design.json): the registered design simulated at the pilot spread, saved under the registration
# it was made for.
def design_card_for(plan: ComparisonPlan) -> DesignCard:
    spec = plan.spec
    return design_card(plan.design(), float(spec.pilot_sd), float(spec.expected_effect))


def ensure_design_card(plan: ComparisonPlan, console: Console) -> dict[str, Any]:
    """The saved card for this registration, computed and saved if missing or made for another. Returns
    ``{"registration_hash", "card", "text"}``."""
    return ensure_card(plan.comp_dir, plan.reg, plan.overrides, lambda: design_card_for(plan), console,
                       f"ab {plan.name}: simulating the design card (the registered looks, arms and rule)")


def save_design_card(plan: ComparisonPlan, card: DesignCard) -> dict[str, Any]:
    return save_card(plan.comp_dir, plan.reg, plan.overrides, card)


def ensure_card(comp_dir: Path, reg: Registered, overrides: list[str], make: Callable[[], Any], console: Console,
                simulating: str) -> dict[str, Any]:
    """The card saved in ``comp_dir`` for this registration; else ``make()``'s (a comparison's or a study's card),
    saved, saying ``simulating`` first (it takes a while)."""
    path = ComparisonFiles(comp_dir).design
    if path.is_file():
        saved = json.loads(path.read_text())
        if saved.get("registration_hash") == registration_hash(reg, overrides):
            return saved
    console.print(simulating)
    return save_card(comp_dir, reg, overrides, make())


def save_card(comp_dir: Path, reg: Registered, overrides: list[str], card: Any) -> dict[str, Any]:
    """Write ``design.json``: the card, its text, and the registration it was made for."""
    saved = {"registration_hash": registration_hash(reg, overrides), "card": card.to_dict(), "text": card.to_text()}
    comp_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(ComparisonFiles(comp_dir).design, json.dumps(saved, indent=2, allow_nan=False) + "\n")
    return saved


def started_elsewhere(comp_dir: Path, reg: Registered, overrides: list[str]) -> bool:
    """The directory was started under another registration: a card made for this one is not saved there."""
    stamp = read_stamp(comp_dir)
    return stamp is not None and stamp.get("hash") != registration_hash(reg, overrides)
