"""A run's life under faults: no path deletes a finished run.

A run at its final eval got USR2 during its final plots; submitit's handler raised ``UncompletedJobError``
("timed-out too many times"); ``runjob._complete`` took that for an unresumable checkpoint, deleted the run
and trained it again from step 0. Here each exception submitit raises (directly, and from its own signal
handler: the time-out refusal and the requeue's ``SystemExit``) is raised at each point of a run's life, in
a first attempt and in a resume: the run directory (its metrics and checkpoints) survives, a run past its
final eval is complete, nothing retrains from step 0, and the next attempt finishes the run with every eval
once. A checkpoint refusal moves a run aside only when no checkpoint loads, and says why.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig
from submitit.core.job_environment import SignalHandler
from submitit.core.utils import DelayedSubmission, FailedJobError, FailedSubmissionError, JobPaths, UncompletedJobError
from submitit.local.local import LOCAL_REQUEUE_RETURN_CODE, LocalJobEnvironment

from dormouse.ab.comparison.registry import load_spec
from dormouse.ab.comparison.runner import plan_runs
from dormouse.ab.launchers.base import DONE, FAILED, INTERRUPTED
from dormouse.ab.runs.job import SET_ASIDE, SET_ASIDE_REASON, Run, RunTask, read_launch_record, run_state, train_run
from dormouse.run.checkpoint import CheckpointError, atomic_save, checkpoint_path, list_checkpoints, load_checkpoint
from dormouse.run.loglines import read_metrics
from tests.helpers.fake_train import FakeTrain
from tests.helpers.planted_run import append_eval, append_log, done_line, eval_rows, write_run_header
from tests.helpers.registrations import registration, write_registry

STEPS, EVERY = 30, 10
SPEC = registration("t", ("rezero", "gr"), looks="[2]", aa_arm=None, fixed=f"[preset=tiny, train.steps={STEPS}, "
                    f"train.eval_every={EVERY}, train.device=cpu, logging.progress=off]")

# The points of a run's life where a fault strikes: the trainer's own order is eval row, checkpoint, then
# (after the last step) the done line, then the probe plots.
POINTS = ("before_first_checkpoint", "after_a_checkpoint", "after_final_eval", "during_plots")
PAST_THE_FINAL_EVAL = ("after_final_eval", "during_plots")


class Life:
    """Stands in for dormouse.train.loop.train: a planted run directory whose checkpoints load (a resume starts
    from the newest one, dropping later rows as the trainer's replay does), an eval and a checkpoint every
    EVERY steps, then the done line, then the plots. ``stop_at``: returns after that step's checkpoint, as
    a killed run leaves it; ``fault`` is called at ``point``. Not tests/helpers/fake_train.py's FakeTrain,
    which plants a comparison's numbers behind checkpoints that never load: this one lives one run through
    the real checkpoint format and the trainer's resume."""

    def __init__(self, *, stop_at: int | None = None, point: str | None = None,
                 fault: Callable[[], None] | None = None) -> None:
        self.calls: list[str] = []  # train.resume of each call
        self.stop_at, self.point, self.fault = stop_at, point, fault

    def _at(self, point: str) -> None:
        if point == self.point and self.fault is not None:
            self.fault()

    def __call__(self, cfg: DictConfig) -> None:
        run_dir = Path(cfg.run.dir) / str(cfg.run.name)
        resume = str(cfg.train.resume)
        self.calls.append(resume)
        start = 0
        if resume == "auto":
            newest = list_checkpoints(run_dir / "checkpoints")[-1]
            start = int(load_checkpoint(newest)["step"])  # a corrupt checkpoint raises CheckpointError
            kept = [r for r in read_metrics(run_dir / "metrics.jsonl") if int(r["step"]) <= start]
            (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
            append_log(run_dir, f"resume step={start} from={newest}")
        else:
            assert not run_dir.exists(), "the run job must hand a fresh run an empty directory"
            write_run_header(run_dir, cfg, {"params": 1000, "arm_params": 10})
            append_log(run_dir, "# dormouse: fake")
        self._at("before_first_checkpoint")
        for row in eval_rows(cfg, 2.0, start=start):
            append_eval(run_dir, cfg, row)
            atomic_save({"step": row["step"]}, checkpoint_path(run_dir / "checkpoints", row["step"]))
            if self.stop_at is not None and row["step"] >= self.stop_at:
                return
            if row["step"] == 2 * EVERY:
                self._at("after_a_checkpoint")
        self._at("after_final_eval")
        append_log(run_dir, done_line(cfg))
        self._at("during_plots")


# --- the faults: submitit's exceptions, raised directly and by submitit's own signal handler -------------

class _Resubmit:
    """A checkpointable job function for submitit's handler (its ``checkpoint`` returns the resubmission)."""

    def __call__(self) -> None:
        pass

    def checkpoint(self) -> DelayedSubmission:
        return DelayedSubmission(self)


@pytest.fixture()
def submitit_handler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[bool], None]]:
    """``install(requeue)``: submitit's own SignalHandler on USR2, as a job has it. ``requeue=False``: the job
    has timed out too many times (it raises ``UncompletedJobError``, the issue's message); ``True``: it
    checkpoints and requeues (a local job exits with SystemExit(LOCAL_REQUEUE_RETURN_CODE))."""
    monkeypatch.setenv("SUBMITIT_LOCAL_JOB_ID", "4242")
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "local")
    previous = signal.getsignal(signal.SIGUSR2)

    def install(requeue: bool) -> None:
        env = LocalJobEnvironment()
        paths = JobPaths(tmp_path / "submitit", job_id="4242")
        paths.folder.mkdir(parents=True, exist_ok=True)
        delayed = DelayedSubmission(_Resubmit() if requeue else (lambda: None))
        delayed.set_timeout(0 if not requeue else 60, 0 if not requeue else 3)  # 0 min: timed out at once
        signal.signal(signal.SIGUSR2, SignalHandler(env, paths, delayed).checkpoint_and_try_requeue)

    yield install
    signal.signal(signal.SIGUSR2, previous)


FAULTS = ("UncompletedJobError", "FailedJobError", "FailedSubmissionError", "handler_timed_out",
          "handler_requeues")


def _fault(name: str, install: Callable[[bool], None]) -> tuple[Callable[[], None], type[BaseException]]:
    """The fault ``name`` as (what the trainer stand-in calls, what reaches the run job)."""
    direct: dict[str, BaseException] = {
        "UncompletedJobError": UncompletedJobError("Job not requeued because: timed-out too many times."),
        "FailedJobError": FailedJobError("Job got killed for an unknown reason."),
        "FailedSubmissionError": FailedSubmissionError("sbatch: error: Batch job submission failed"),
    }
    if name in direct:
        exc = direct[name]

        def fault() -> None:
            raise exc
        return fault, type(exc)
    install(name == "handler_requeues")
    return (lambda: signal.raise_signal(signal.SIGUSR2)), (SystemExit if name == "handler_requeues"
                                                           else UncompletedJobError)


@pytest.fixture(scope="module")
def composed(tmp_path_factory: pytest.TempPathFactory) -> Run:
    reg = write_registry(tmp_path_factory.mktemp("comparison"), "t", SPEC)
    return next(p for p in plan_runs(load_spec("t", reg), [], reg / "ab" / "t") if p.name == "rezero-s1")


def _pair(composed: Run, comp: Path) -> Run:
    import copy

    cfg = copy.deepcopy(composed.cfg)
    cfg.run.dir = str(comp)
    return Run(composed.arm, composed.seed, cfg, comp / composed.name)


def _attempt(run: Run, comp: Path, train: Life) -> Any:
    return train_run(RunTask(run, comp, train, "sequential"))


def _steps(run: Run) -> list[int]:
    return [int(r["step"]) for r in read_metrics(run.files.metrics)]


@pytest.mark.parametrize("attempt", ["first", "resume"])
@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("fault", FAULTS)
def test_no_submitit_exception_at_any_point_of_a_runs_life_deletes_or_retrains_it(
        tmp_path: Path, composed: Run, submitit_handler: Callable[[bool], None], fault: str, point: str,
        attempt: str) -> None:
    """A fault during the attempt keeps everything on disk; past the final eval the run is done;
    otherwise it fails (or submitit's requeue exits), and the next attempt resumes it. No call starts it over
    from step 0, no file of the first life is replaced, nothing is set aside."""
    comp = tmp_path / "ab" / "t"
    run = _pair(composed, comp)
    calls_before: list[str] = []
    if attempt == "resume":  # a first life killed after its step-10 checkpoint
        first = Life(stop_at=EVERY)
        assert _attempt(run, comp, first).status == FAILED
        calls_before = first.calls
    survivor = checkpoint_path(run.files.checkpoints, EVERY)
    fault_fn, reaching = _fault(fault, submitit_handler)
    faulty = Life(point=point, fault=fault_fn)
    if reaching is SystemExit:  # submitit requeued the job: the exit passes through, the attempt is recorded
        with pytest.raises(SystemExit) as exited:
            _attempt(run, comp, faulty)
        assert exited.value.code == LOCAL_REQUEUE_RETURN_CODE
        assert read_launch_record(comp, run.name)["attempts"][-1]["state"] == "stopped"
    else:
        outcome = _attempt(run, comp, faulty)
        if point in PAST_THE_FINAL_EVAL:
            assert outcome.status == DONE, outcome
            assert "after its final eval" in outcome.note and reaching.__name__ in outcome.note
        else:
            assert outcome.status == FAILED and outcome.note.startswith(reaching.__name__), outcome
    assert faulty.calls == (["auto"] if attempt == "resume" else ["never"]), "retrained within the attempt"
    assert calls_before + faulty.calls == ["never", "auto"][: len(calls_before) + 1]
    assert not (comp / SET_ASIDE).exists()
    steps = _steps(run)
    assert steps == list(range(EVERY, steps[-1] + 1, EVERY)) if steps else attempt == "first"
    if steps:
        assert checkpoint_path(run.files.checkpoints, steps[-1]).is_file()
    if point in PAST_THE_FINAL_EVAL:
        assert steps[-1] == STEPS and run_state(run)[0] == "complete"
    inode = survivor.stat().st_ino if survivor.exists() else None

    # The rerun (or the requeued job) finishes the run from what is on disk, every eval once.
    signal.signal(signal.SIGUSR2, signal.SIG_DFL)
    again = Life()
    assert _attempt(run, comp, again).status == DONE
    expected = ([] if point in PAST_THE_FINAL_EVAL else
                ["never"] if attempt == "first" and point == "before_first_checkpoint" else ["auto"])
    assert again.calls == expected
    assert _steps(run) == list(range(EVERY, STEPS + 1, EVERY))
    assert run.files.log.read_text().count("\ndone ") == 1
    if inode is not None:
        assert survivor.stat().st_ino == inode, "a checkpoint of the earlier life was replaced"


def test_a_refused_checkpoint_that_loads_fails_the_run_and_moves_nothing(tmp_path: Path, composed: Run) -> None:
    """A CheckpointError while the checkpoints still load (a bug, a full disk) is not the checkpoint's
    fault: the run fails, its directory stays where it is, and the next attempt resumes it."""
    comp = tmp_path / "ab" / "t"
    run = _pair(composed, comp)
    _attempt(run, comp, Life(stop_at=2 * EVERY))

    def refuse() -> None:
        raise CheckpointError("planted refusal of a checkpoint that loads")

    faulty = Life(point="before_first_checkpoint", fault=refuse)
    outcome = _attempt(run, comp, faulty)
    assert outcome.status == FAILED and "planted refusal" in outcome.note and faulty.calls == ["auto"]
    assert not (comp / SET_ASIDE).exists() and _steps(run) == [EVERY, 2 * EVERY]
    again = Life()
    assert _attempt(run, comp, again).status == DONE and again.calls == ["auto"]


def test_a_run_whose_checkpoints_are_all_unreadable_is_moved_aside_with_its_reason_then_restarted(
        tmp_path: Path, composed: Run) -> None:
    """The one case a resume starts a run over: the resume refused its checkpoint and none loads. The run
    is moved (not deleted) to <comparison>/set_aside/, the reason written in it and in the launch record."""
    comp = tmp_path / "ab" / "t"
    run = _pair(composed, comp)
    _attempt(run, comp, Life(stop_at=2 * EVERY))
    for ckpt in list_checkpoints(run.files.checkpoints):
        ckpt.write_bytes(b"truncated")
    train = Life()
    outcome = _attempt(run, comp, train)
    assert outcome.status == DONE and train.calls == ["auto", "never"]
    assert _steps(run) == list(range(EVERY, STEPS + 1, EVERY))
    (aside,) = (comp / SET_ASIDE).iterdir()
    assert aside.name.startswith(run.name + ".")
    reason = (aside / SET_ASIDE_REASON).read_text()
    assert "CheckpointError" in reason and "is unreadable" in reason
    assert [int(r["step"]) for r in read_metrics(aside / "metrics.jsonl")] == [EVERY, 2 * EVERY]  # kept whole
    note = read_launch_record(comp, run.name)["attempts"][-1]["note"]
    assert "no checkpoint loads" in note and str(aside) in note


def test_a_finished_run_without_its_done_line_is_kept_and_its_log_finished(tmp_path: Path, composed: Run) -> None:
    """Killed between its final checkpoint and its done line: complete, never retrained; the run job writes
    the done line (after a comment saying so), so `dormouse logs --check` reads the run as finished."""
    from dormouse.run.checks import checked_run

    comp = tmp_path / "ab" / "t"
    run = _pair(composed, comp)

    def killed() -> None:
        raise KeyboardInterrupt  # a second Ctrl-C: the loop stops at once

    assert _attempt(run, comp, Life(point="after_final_eval", fault=killed)).status == INTERRUPTED
    assert run_state(run)[0] == "complete" and not checked_run(run.run_dir).finished
    again = Life()
    outcome = _attempt(run, comp, again)
    assert outcome.status == DONE and again.calls == [] and "wrote its done line" in outcome.note
    checked = checked_run(run.run_dir)
    assert checked.finished and not [f for f in checked.findings if f.kind == "unfinished"]
    assert "# dormouse ab: the run stopped after its final eval" in run.files.log.read_text()


def test_a_run_killed_between_its_final_eval_row_and_its_final_checkpoint_is_complete(
        tmp_path: Path, composed: Run) -> None:
    """The final eval row is the run's number (the runner counts a run complete by it, the report reads
    it): a run killed after writing it, before its final checkpoint and its done line, is complete too, not
    resumed from an earlier checkpoint; the run job finishes its log."""
    from dormouse.run.reader import read_run

    comp = tmp_path / "ab" / "t"
    run = _pair(composed, comp)
    assert _attempt(run, comp, Life()).status == DONE
    checkpoint_path(run.files.checkpoints, STEPS).unlink()
    run.files.log.write_text("".join(ln for ln in run.files.log.read_text().splitlines(keepends=True)
                                      if not ln.startswith("done ")))
    assert run_state(run)[0] == "complete"
    again = Life()
    outcome = _attempt(run, comp, again)
    assert outcome.status == DONE and again.calls == [] and "wrote its done line" in outcome.note
    assert read_run(run.run_dir).finished and _steps(run) == list(range(EVERY, STEPS + 1, EVERY))


def test_the_driver_finishes_a_complete_run_it_would_not_schedule(tmp_path: Path) -> None:
    """The runner schedules only runs without a final eval, so a run stopped between its final checkpoint
    and its done line is never handed to a run job; the driver's pass finishes its log (under the run's
    lock) instead of leaving it "unfinished" to the counter check, which would invalidate its arm."""
    from rich.console import Console

    from dormouse.ab.comparison.runner import run_comparison

    arms = ("rezero", "gr", "attnres_full", "attnres_block", "rezero_aa")
    reg = write_registry(tmp_path, "t", registration("t", arms))
    root = tmp_path / "ab"
    run_comparison("t", [], root=root, console=Console(record=True, width=200), registry=reg, train_fn=FakeTrain())
    log = root / "t" / "gr-s2" / "train.log"
    log.write_text("".join(ln for ln in log.read_text().splitlines(keepends=True) if not ln.startswith("done ")))
    console, again = Console(record=True, width=200), FakeTrain()
    out = run_comparison("t", [], root=root, console=console, registry=reg, train_fn=again).plan.comp_dir
    assert again.calls == []
    gr = json.loads((out / "results.json").read_text())["arms"]["gr"]
    assert gr["counter_check"] == "pass" and gr["verdict"] == "better", gr["findings"]
    assert "gr-s2: finished at step 20: its final eval is on disk" in console.export_text()


def test_a_run_with_its_final_eval_but_no_checkpoint_is_kept(
        tmp_path: Path, composed: Run) -> None:
    """A run whose final eval is on disk is complete even with its checkpoints lost (no done line): kept, never
    retrained. A restart (no checkpoint to resume, no final eval) removes only such an empty start."""
    comp = tmp_path / "ab" / "t"
    run = _pair(composed, comp)
    _attempt(run, comp, Life())
    for ckpt in list_checkpoints(run.files.checkpoints):
        ckpt.unlink()
    log = run.files.log
    log.write_text("".join(ln for ln in log.read_text().splitlines(keepends=True) if not ln.startswith("done ")))
    assert run_state(run)[0] == "complete"
    train = Life()
    outcome = _attempt(run, comp, train)
    assert outcome.status == DONE and train.calls == [] and not (comp / SET_ASIDE).exists()
    assert _steps(run) == list(range(EVERY, STEPS + 1, EVERY))

    other = _pair(composed, tmp_path / "ab2" / "t")
    _attempt(other, other.run_dir.parent, Life(point="before_first_checkpoint", fault=_fault(
        "UncompletedJobError", lambda requeue: None)[0]))
    assert run_state(other)[0] == "restart"
    again = Life()
    assert _attempt(other, other.run_dir.parent, again).status == DONE and again.calls == ["never"]
    assert not (other.run_dir.parent / SET_ASIDE).exists()  # nothing worth keeping: removed


def tear_final_row(run_dir: Path) -> str:
    """Cut metrics.jsonl's last row in half, as a power loss after the final checkpoint leaves it; returns the row."""
    metrics = run_dir / "metrics.jsonl"
    final = metrics.read_text().splitlines(keepends=True)[-1]
    metrics.write_bytes(metrics.read_bytes()[:-(len(final) // 2)])
    return final


@pytest.mark.slow
def test_a_comparison_rebuilds_a_run_final_row_torn_after_its_final_checkpoint_and_counts_the_run(
        tmp_path: Path) -> None:
    """The real trainer, 4 steps a run: a run whose final metrics row was torn after its final checkpoint is
    resumed by the rerun (`dormouse ab FILE`, as a user types it), which re-evaluates the checkpoint and writes
    the row again, byte for byte; the run counts and its arm keeps its verdict (not ``invalid`` from a failed
    run, rerun after rerun)."""
    from rich.console import Console
    from typer.testing import CliRunner

    from dormouse.ab.comparison.runner import run_comparison
    from dormouse.cli.app import app
    from dormouse.train.loop import train

    fixed = ("[preset=tiny, train.steps=4, train.eval_every=2, data.eval_bytes=512, train.device=cpu, "
             "logging.progress=off]")
    reg = write_registry(tmp_path, "t", registration("t", ("rezero", "gr"), looks="[2]", aa_arm=None, fixed=fixed))

    def compare() -> dict[str, Any]:
        out = run_comparison("t", [], root=tmp_path / "ab", console=Console(record=True), registry=reg,
                             train_fn=train).plan.comp_dir
        return json.loads((out / "results.json").read_text())

    before = compare()
    run_dir = tmp_path / "ab" / "t" / "gr-s2"
    final = tear_final_row(run_dir)
    rerun = CliRunner().invoke(app, ["ab", str(reg / "t.yaml"), "--root", str(tmp_path / "ab")])  # as typed
    assert rerun.exit_code == 0, rerun.output[-2000:] + repr(rerun.exception)
    after = json.loads((tmp_path / "ab" / "t" / "results.json").read_text())
    assert (run_dir / "metrics.jsonl").read_text().splitlines(keepends=True)[-1] == final
    assert after["complete"] and after["arms"]["gr"]["verdict"] == before["arms"]["gr"]["verdict"] != "invalid"
    assert after["arms"]["gr"]["counter_check"] == "pass", after["arms"]["gr"]["findings"]
    assert read_launch_record(tmp_path / "ab" / "t", "gr-s2")["attempts"][-1]["state"] == DONE


def _files(run_dir: Path) -> set[str]:
    return {str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file()}


@pytest.mark.parametrize("checkpoint", [True, False], ids=["checkpoint", "no_checkpoint"])
@pytest.mark.parametrize("final", ["row", "torn_row", "none"])
def test_a_restart_never_deletes_a_run_holding_a_final_eval_or_a_checkpoint(
        tmp_path: Path, composed: Run, final: str, checkpoint: bool) -> None:
    """Each (final eval, checkpoint) combination through the run job: a run holding its final eval (the metrics
    row, or only train.log's line when the row was torn) or a checkpoint keeps every file and never trains again
    from step 0; only a run with neither is removed and started over."""
    comp = tmp_path / "ab" / "t"
    run = _pair(composed, comp)
    _attempt(run, comp, Life(stop_at=None if final != "none" else 2 * EVERY))
    if final == "torn_row":
        tear_final_row(run.run_dir)
    if not checkpoint:
        for ckpt in list_checkpoints(run.files.checkpoints):
            ckpt.unlink()
    before, again = _files(run.run_dir), Life()
    _attempt(run, comp, again)
    if final == "none" and not checkpoint:
        assert again.calls == ["never"]  # nothing worth keeping: removed and started over
    else:
        assert "never" not in again.calls and before <= _files(run.run_dir)
