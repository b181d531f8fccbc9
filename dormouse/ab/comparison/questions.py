"""The comparison's read-only questions: ``dormouse ab plan`` (what a run would do), ``status`` (where it stands)
and ``design`` (the registered design's card, saved with the comparison). Each takes a registered name or a
loaded registration (a study's point, dormouse/ab/study/questions.py). Refusals raise; the CLI's one handler
(dormouse/cli/exits.py) says them and exits 2.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from dormouse.ab.comparison.binding import (
    design_card_for,
    read_stamp,
    refuse_protocol_1,
    registration_state,
    save_design_card,
    started_elsewhere,
)
from dormouse.ab.comparison.plan import build_plan
from dormouse.ab.comparison.registry import PROTOCOL, ComparisonError, Registered, load_spec
from dormouse.ab.comparison.status import (
    budget_lines,
    comparison_status,
    render_looks,
    render_plan,
    render_status,
    tune_cost_line,
)
from dormouse.ab.launchers.base import LaunchError
from dormouse.ab.launchers.request import LaunchRequest, resolve_launch
from dormouse.ab.rule.contrast import contrast_card
from dormouse.ab.rule.looks import progress, read_run
from dormouse.ab.tune import stage as tune
from dormouse.run.files import ComparisonFiles


def _say(console: Console, line: str) -> None:
    console.print(line, soft_wrap=True, highlight=False, markup=False)


# how the stamp lines name what started: a comparison's title and what it lists below, or a study's
_STARTED = {"comparison": ("ab", "runs"), "study": ("study", "points")}


def started_stamp(comp_dir: Path, reg: Registered, console: Console, what: str = "comparison") -> dict | None:
    """The stamp of a started comparison (or study), noting a registered file changed since; None, said, if it
    never started."""
    title, below = _STARTED[what]
    stamp = read_stamp(comp_dir)
    if stamp is None:
        console.print(f"{title} {reg.spec.name}: not started ({ComparisonFiles(comp_dir).registration} does not "
                      f"exist); `dormouse ab plan {reg.argument}` shows what it would run")
        return None
    if stamp.get("sha256") != reg.sha256:
        console.print(f"[yellow]note:[/] {reg.source} changed since the {what} started; the {below} below "
                      "follow the file as it is now")
    return stamp


# What the plan leaves to the run: the machine is torch's question, and the read-only verbs import no torch.
MACHINE_AT_RUN = ("this machine (CUDA, a GPU per job, each arm's kernel): not checked by `ab plan`, which imports "
                  "no torch; `dormouse ab run` checks it before any run")


def plan_command(name: str | Registered, overrides: list[str], *, root: Path, registry: Path | None,
                 launch: LaunchRequest, console: Console) -> None:
    """``plan``: compose and check everything a run would but the machine (:data:`MACHINE_AT_RUN`), print the plan
    and its looks, write nothing."""
    plan = build_plan(name, overrides, root, registry)
    try:
        settings = resolve_launch(launch, plan.runs, machine=False).settings()
    except LaunchError as exc:
        raise ComparisonError(exc.lines) from exc
    render_plan(plan, launch=settings, registration=registration_state(plan.comp_dir, plan.reg, plan.overrides),
                console=console)
    _say(console, MACHINE_AT_RUN)
    if plan.tune_runs:
        outcome = tune.settle(plan, read_run, set())
        _say(console, tune_cost_line(plan))
        for line in tune.plan_lines(plan, outcome):
            _say(console, line)


def design_command(name: str | Registered, overrides: list[str], *, root: Path, registry: Path | None,
                   console: Console) -> None:
    """``design``: simulate the registered design, print its card and save it with the comparison (unless
    the comparison directory holds another registration's runs). Trains nothing."""
    plan = build_plan(name, overrides, root, registry)
    refuse_protocol_1(plan.reg)
    card = design_card_for(plan)
    _say(console, card.to_text())
    if plan.spec.contrast is not None:
        c = plan.spec.contrast
        _say(console, f"the registered contrast {c.arm} − {c.against} (its own family of one test, SESOI {c.sesoi:g}, "
             f"at its pilot sd {c.pilot_sd:g} and expected effect {c.expected_effect:+g}):")
        _say(console, contrast_card(plan.spec).to_text())
    for line in budget_lines(plan):
        _say(console, line)
    if plan.tune_runs:
        _say(console, tune_cost_line(plan))
    if started_elsewhere(plan.comp_dir, plan.reg, plan.overrides):
        console.print(f"not saved: {plan.comp_dir} holds a comparison started under another registration")
        return
    save_design_card(plan, card)
    console.print(f"saved: {plan.files.design} (the report shows it)")


def status_command(name: str | Registered, *, root: Path, registry: Path | None, console: Console) -> int:
    """``status``: where a comparison stands, run by run and look by look (read-only; safe while it
    runs). Exit 0; 2 if never started."""
    reg = name if isinstance(name, Registered) else load_spec(name, registry)
    stamp = started_stamp((Path(root) / reg.spec.name).resolve(), reg, console)
    if stamp is None:
        return 2
    plan = build_plan(reg, list(stamp.get("overrides", [])), root)
    status = comparison_status(plan)
    render_status(plan, status, console)
    if plan.reg.protocol == PROTOCOL:
        failed = {r["pair"] for r in status["pairs"] if r["state"] == "failed"}
        state = progress(plan, read_run, failed=failed)
        for line in tune.plan_lines(plan, state.tune):
            _say(console, line)
        render_looks(plan, state, console)
    return 0
