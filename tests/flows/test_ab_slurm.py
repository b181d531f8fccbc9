"""`dormouse ab NAME --launcher slurm` against a real SLURM: a comparison submitted as job
arrays, collected, bit-identical to a sequential run; USR2 preemption, SLURM's own time-limit signal and a
SIGTERM requeue resumed; submitit's requeue killed by its own SIGTERM survived; a run cancelled while
pending and a job that dies without a result reported failed within launcher.lost_after_s, never a hang.

The cluster: ``scripts/slurm_cluster.sh up`` (a single node with accounting; root). Without one these tests
skip, saying why, except where ``DORMOUSE_SLURM_TESTS=required`` (``.ci/run`` sets it after bringing the
cluster up): there a missing cluster fails them. The same decisions without a cluster:
tests/flows/test_ab_cluster.py; submitit's local executor: tests/flows/test_ab_launch.py."""

from __future__ import annotations

import _thread
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig

from dormouse.ab.comparison.command import ab_plan
from dormouse.ab.comparison.questions import status_command
from dormouse.ab.comparison.runner import run_comparison
from dormouse.ab.launchers.request import LaunchRequest
from dormouse.ab.runs.job import read_launch_record

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parents[1]
REQUIRED = os.environ.get("DORMOUSE_SLURM_TESTS", "") == "required"
pytestmark = pytest.mark.slow  # minutes of SLURM's clock: started first, beside the others (tests/conftest.py)

# Planted behaviour, read inside the jobs (sbatch passes the environment on): run -> "wait" (train to step
# 2, say so in MARKS/<run>.ready, and wait for a stop signal, which the trainer then honours: checkpoint at
# step 2, exit 128 + the signal), "hold" (the same, but wait for MARKS/<run>.go, then train on) or "die"
# (SIGKILL before training: no result). First attempt only.
PLANT_ENV, MARKS_ENV = "DORMOUSE_TEST_PLANT", "DORMOUSE_TEST_MARKS"


def _slurm_problem() -> str | None:
    """Why there is no usable SLURM here (None: there is one)."""
    for tool in ("sbatch", "srun", "squeue", "scontrol", "sacct"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not on PATH"
    try:
        nodes = subprocess.run(["sinfo", "-h", "-N", "-p", "debug", "-o", "%T"], capture_output=True, text=True,
                               timeout=20, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"sinfo failed ({exc})"
    if not any(n.rstrip("*") in ("idle", "mixed", "allocated") for n in nodes):
        return f"no usable node in partition debug (sinfo: {' '.join(nodes) or 'none'})"
    return None


@pytest.fixture(scope="module")
def slurm() -> None:
    problem = _slurm_problem()
    if problem is None:
        return
    why = f"no SLURM cluster ({problem}); bring one up with `scripts/slurm_cluster.sh up` (root)"
    if REQUIRED:
        pytest.fail(f"DORMOUSE_SLURM_TESTS=required but {why}")
    pytest.skip(why)


def planted(cfg: DictConfig) -> Any:
    """The trainer, with the first attempt of the planted runs stopped as the plan says (see PLANT_ENV)."""
    import dormouse.train.loop as train_module

    plan = json.loads(os.environ.get(PLANT_ENV) or "{}")
    name, first = str(cfg.run.name), str(cfg.train.resume) == "never"
    action = plan.get(name) if first else None
    if action == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    if action in ("wait", "hold"):
        step = train_module.train_step

        def waiting_step(run: Any, loop: Any) -> float:
            loss = step(run, loop)
            if loop.step == 2:
                marks = Path(os.environ[MARKS_ENV])
                (marks / f"{name}.ready").write_text(f"{os.environ.get('DORMOUSE_JOB_ID', '?')} {os.getpid()}")
                flag = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)  # the loop's _SignalFlag
                t0 = time.monotonic()
                while time.monotonic() - t0 < 240 and (getattr(flag, "signum", None) is None if action == "wait"
                                                       else not (marks / f"{name}.go").exists()):
                    time.sleep(0.1)
            return loss

        train_module.train_step = waiting_step
    return train_module.train(cfg)


@pytest.fixture(scope="module")
def sequential(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The tiny comparison run sequentially with one thread: the numbers every launcher must reproduce."""
    from test_ab_launch import _console, _registry

    tmp = tmp_path_factory.mktemp("seq")
    reg = _registry(tmp)
    return reg, run_comparison("t", [], root=tmp / "seq", console=_console(), registry=reg,
                               launch=LaunchRequest(threads=1)).plan.comp_dir


def _environment(monkeypatch: pytest.MonkeyPatch, marks: Path, plant: dict[str, str]) -> None:
    """What the jobs inherit: this checkout first on the path (not an installed copy), the planted trainer,
    where to leave its marks."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv(PLANT_ENV, json.dumps(plant))
    marks.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv(MARKS_ENV, str(marks))


def _launch(*extra: str) -> LaunchRequest:
    return LaunchRequest(launcher="slurm", launcher_overrides=[
        "partition=debug", "gpus_per_run=0", "cpus_per_task=1", "poll_s=1", *extra])


class Signaller:
    """A thread that acts on the planted runs' marks: run -> what to do with its job once it waits."""

    def __init__(self, marks: Path, actions: dict[str, Callable[[str, int], None]]) -> None:
        self.marks, self.actions = marks, dict(actions)
        self.done: dict[str, str] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set() and self.actions:
            for run in list(self.actions):
                mark = self.marks / f"{run}.ready"
                if mark.is_file() and mark.read_text():
                    job, pid = mark.read_text().split()
                    try:
                        self.actions.pop(run)(job, int(pid))
                        self.done[run] = job
                    except Exception as exc:  # said by the test, not lost in a thread
                        self.errors.append(f"{run} ({job}): {exc}")
            time.sleep(0.2)

    def __enter__(self) -> Signaller:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@contextlib.contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """A Ctrl-C to this process after ``seconds``: a driver that would wait forever (a lost job, a requeue
    mistaken for the end) is stopped (it cancels its jobs and the comparison raises Interrupted), so the test
    fails instead of hanging."""
    timer = threading.Timer(seconds, _thread.interrupt_main)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _run(*cmd: str) -> None:
    subprocess.run(list(cmd), check=True, capture_output=True, text=True, timeout=30)


@pytest.fixture
def race_scontrol(tmp_path: Path) -> Iterator[Path]:
    """A folder with an `scontrol` that runs the real one and, for `requeue`, then dies by SIGTERM: the
    race a real cluster shows in about 1 requeue in 13 (the requeue's SIGTERM reaches every process of the
    job, scontrol included, before it exits), made certain."""
    real = shutil.which("scontrol")
    assert real is not None
    folder = tmp_path / "race-bin"
    folder.mkdir()
    wrapper = folder / "scontrol"
    wrapper.write_text(f'#!/bin/sh\n"{real}" "$@"\nrc=$?\n[ "$1" = requeue ] && kill -TERM $$\nexit $rc\n')
    wrapper.chmod(0o755)
    yield folder


def test_slurm_runs_equal_sequential_and_preempted_requeued_and_timed_out_runs_resume(
        slurm: None, sequential: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        race_scontrol: Path) -> None:
    """Each look a job array on SLURM. gr-s1 is preempted (USR2, with submitit's `scontrol requeue` killed
    by its own SIGTERM), rezero-s1 requeued by `scontrol requeue` (SIGTERM), rezero-s2 waits at step 2 until
    SLURM's own time-limit signal: each resumes from its step-2 checkpoint in its requeued job, and every
    run's numbers equal the sequential run's, bit for bit."""
    from test_ab_launch import _console, _deviation, _numbers, _verdicts

    reg, seq = sequential
    marks = tmp_path / "marks"
    plant = {"gr-s1": "wait", "rezero-s1": "wait", "rezero-s2": "wait"}
    _environment(monkeypatch, marks, plant)
    console = _console()
    # time_min=4 with signal_delay_s=120: SLURM sends USR2 120 s before the limit, or up to 60 s earlier
    # (its timer's resolution), so from 60 s into a job: only the waiting rezero-s2 lives to see it; the
    # others finish in seconds. (A signal before the job's Python set its handlers would kill it.)
    launch = _launch("time_min=4", "signal_delay_s=120", "lost_after_s=60",
                     f"setup=['export PATH={race_scontrol}:$PATH']")
    # Preemption's USR2 straight to the job's process, as slurmstepd delivers it: `scancel --signal=USR2` on
    # an array task answers "Job can not be altered now, try again later" while the job requeues, and its
    # retry signals the requeued job too (slurm 22.05).
    actions = {"gr-s1": lambda job, pid: os.kill(pid, signal.SIGUSR2),
               "rezero-s1": lambda job, pid: _run("scontrol", "requeue", job)}
    t0 = time.monotonic()
    with Signaller(marks, actions) as signaller, watchdog(480):
        out = run_comparison("t", [], root=tmp_path / "slurm", console=console, registry=reg, train_fn=planted,
                             launch=launch).plan.comp_dir
    elapsed = time.monotonic() - t0
    text = console.export_text()
    assert not signaller.errors, signaller.errors
    assert set(signaller.done) == {"gr-s1", "rezero-s1"}, (signaller.done, text)
    # No run came back interrupted or failed: each requeued job was waited for (otherwise the board
    # says "interrupted rezero-s1" and the look ends while the requeued job goes on).
    assert not re.search(r"^\S+ (interrupted|failed) ", text, re.M), text
    a, b = _numbers(seq), _numbers(out)
    assert a == b, f"SLURM runs differ from sequential: deviation={_deviation(a, b):.3g} bound=0\n{text}"
    assert _verdicts(out) == _verdicts(seq)
    for run in ("gr-s1", "rezero-s1", "rezero-s2"):
        attempts = read_launch_record(out, run)["attempts"]
        states = [x["state"] for x in attempts]
        assert states[0] == "interrupted" and states[-1] == "done" and len(states) >= 2, (run, attempts)
        assert attempts[1]["note"] == "resumed from its checkpoint", (run, attempts)
        assert {x["job_id"] for x in attempts} == {signaller.done.get(run, attempts[0]["job_id"])}
        assert "resume step=2" in (out / run / "train.log").read_text()
    for run, job in signaller.done.items():  # the record's job id is the one the board showed (item 5)
        assert re.search(rf"{run}\b.*slurm job {job}\b", text), (run, job, text)
    logs = "".join(p.read_text() for p in sorted((out / "submitit").glob("*_log.*")))
    assert logs.count("sent by the requeue it asked for") >= 2  # gr-s1's and rezero-s2's race, survived
    assert "SIGTERM was SLURM's requeue" in logs  # rezero-s1's job ended without a result
    assert all(read_launch_record(out, p)["attempts"][-1]["state"] == "done" for p in
               ("gr-s1", "gr-s2", "rezero-s1", "rezero-s2"))
    print(f"slurm comparison with 3 requeues: {elapsed:.0f} s")


def test_slurm_a_run_cancelled_while_pending_and_a_job_that_dies_are_failed_not_waited_on(
        slurm: None, sequential: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One run at a time (array_parallelism=1); the last run's array task is cancelled while it pends
    (SLURM keeps no record of it), rezero-s2's job is killed before it writes a result, and sacct does not
    answer (a cluster without accounting): both are failed within lost_after_s, the look ends, the others
    are done."""
    from test_ab_launch import _console

    reg, _ = sequential
    marks = tmp_path / "marks"
    _environment(monkeypatch, marks, {"rezero-s2": "die"})
    no_sacct = tmp_path / "no-sacct"
    no_sacct.mkdir()
    (no_sacct / "sacct").write_text("#!/bin/sh\necho 'sacct: error: accounting storage is disabled' >&2\nexit 1\n")
    (no_sacct / "sacct").chmod(0o755)
    monkeypatch.setenv("PATH", f"{no_sacct}{os.pathsep}{os.environ['PATH']}")
    cancelled: list[str] = []

    def cancel_the_last_pending() -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60 and not cancelled:
            lines = subprocess.run(["squeue", "-h", "-r", "--me", "-t", "PENDING", "-n", "ab-t", "-o", "%i"],
                                   capture_output=True, text=True).stdout.split()
            tasks = sorted((t for t in lines if "_" in t), key=lambda t: int(t.split("_")[1]))
            if len(tasks) >= 2:
                _run("scancel", tasks[-1])
                cancelled.append(tasks[-1])
            time.sleep(0.2)

    thread = threading.Thread(target=cancel_the_last_pending, daemon=True)
    thread.start()
    console = _console()
    t0 = time.monotonic()
    with watchdog(300):
        out = run_comparison("t", [], root=tmp_path / "slurm", console=console, registry=reg, train_fn=planted,
                             launch=_launch("array_parallelism=1", "lost_after_s=15", "time_min=10",
                                            "signal_delay_s=30")).plan.comp_dir
    elapsed = time.monotonic() - t0
    thread.join(timeout=5)
    text = console.export_text()
    assert cancelled, text
    results = json.loads((out / "results.json").read_text())
    flat = json.dumps(results)
    assert f"job {cancelled[0]}: SLURM has no record of it" in text, text
    assert "without a result" in text and "lost_after_s" in text, text
    done = [p for p in ("gr-s1", "gr-s2", "rezero-s1", "rezero-s2")
            if (read_launch_record(out, p)["attempts"] or [{}])[-1].get("state") == "done"]
    assert done == ["gr-s1", "rezero-s1"], (done, text)
    assert "rezero-s2" in text.split("without a result")[0].splitlines()[-1], text
    assert "invalid" in flat
    # Bounded: the runs (one at a time, seconds each) plus lost_after_s for the two lost ones, not a hang.
    assert elapsed < 240, f"{elapsed:.0f} s"
    status = _console()  # what the operator sees afterwards: the runs the driver failed, failed
    status_command("t", root=tmp_path / "slurm", registry=reg, console=status)
    rows = {ln.split()[0]: ln for ln in status.export_text().splitlines() if ln.strip() and "-s" in ln.split()[0]}
    assert rows["rezero-s2"].split()[1] == "failed" and rows["gr-s2"].split()[1] == "failed", status.export_text()
    print(f"slurm comparison with 2 lost jobs: {elapsed:.0f} s")


def _job_file(comp: Path, run: str) -> dict[str, Any]:
    return json.loads((comp / "launch" / f"{run}.job.json").read_text())


def _live(job_ids: set[str]) -> set[str]:
    """Which of ``job_ids`` squeue still lists in a live state."""
    from dormouse.ab.launchers.cluster import LIVE_STATES, squeue_states

    queue = squeue_states() or {}
    return {j for j in job_ids if queue.get(j, "").split(" ")[0] in LIVE_STATES}


def test_slurm_a_sigterm_to_the_driver_cancels_its_jobs_which_checkpoint_and_it_exits_143(
        slurm: None, sequential: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`kill -TERM` of the driver while gr-s1 trains (at step 2) and others wait in the queue: the driver
    cancels every unfinished job, waits for gr-s1's job to checkpoint and end, and raises Interrupted with
    143; no job of the comparison is left in the queue, and the comparison's and runs' locks are free."""
    from test_ab_launch import _console

    from dormouse.errors import Interrupted
    from dormouse.run.files import ComparisonFiles
    from dormouse.run.lock import comparison_lock, is_locked

    reg, _ = sequential
    marks = tmp_path / "marks"
    _environment(monkeypatch, marks, {"gr-s1": "wait"})
    console = _console()
    comp = tmp_path / "slurm" / "t"
    actions = {"gr-s1": lambda job, pid: os.kill(os.getpid(), signal.SIGTERM)}  # the driver is this process
    with Signaller(marks, actions) as signaller, watchdog(240), pytest.raises(Interrupted) as stopped:
        run_comparison("t", [], root=tmp_path / "slurm", console=console, registry=reg, train_fn=planted,
                       launch=_launch("time_min=10", "signal_delay_s=30"))
    text = console.export_text()
    assert not signaller.errors and "gr-s1" in signaller.done, (signaller.errors, text)
    assert stopped.value.exit_code == 143, text
    assert "SIGTERM: cancelled" in capsys.readouterr().out, text
    jobs = {run: _job_file(comp, run) for run in ("rezero-s1", "gr-s1", "rezero-s2", "gr-s2")
            if (comp / "launch" / f"{run}.job.json").is_file()}
    assert "gr-s1" in jobs and not _live({j["job_id"] for j in jobs.values()}), (jobs, text)
    attempt = read_launch_record(comp, "gr-s1")["attempts"][-1]
    assert attempt["state"] == "interrupted" and "checkpoint" in attempt["note"], attempt
    assert "interrupted step=2" in (comp / "gr-s1" / "train.log").read_text()  # checkpointed at its next step
    assert jobs["gr-s1"]["state"] == "interrupted"
    comparison_lock(comp).acquire().release()  # free: the driver let go of it
    assert not any(is_locked(ComparisonFiles(comp).run_lock(run)) for run in jobs)


# A driver in its own process, to be SIGKILLed: the tiny comparison on SLURM with the planted trainer.
DRIVER = """
import sys
from pathlib import Path

from test_ab_launch import _console
from test_ab_slurm import _launch, planted

from dormouse.ab.comparison.runner import run_comparison

run_comparison("t", [], root=Path(sys.argv[1]), console=_console(), registry=Path(sys.argv[2]), train_fn=planted,
               launch=_launch("time_min=10", "signal_delay_s=30"))
"""


def _wait_for(what: str, ready: Callable[[], bool], seconds: float = 120) -> None:
    t0 = time.monotonic()
    while not ready():
        assert time.monotonic() - t0 < seconds, f"no {what} after {seconds:g} s"
        time.sleep(0.2)


def test_slurm_a_rerun_after_a_killed_driver_adopts_its_live_job_and_submits_no_duplicate(
        slurm: None, sequential: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver is SIGKILLed while gr-s1's job trains (held at step 2): the job goes on without it. The
    rerun finds that job still in the queue (launch/gr-s1.job.json names it), says so, waits for it rather
    than submitting a second one, counts its result, and ends complete with the sequential run's numbers;
    gr-s1 ran once, in the first driver's job."""
    from test_ab_launch import _console, _deviation, _numbers, _verdicts

    reg, seq = sequential
    marks = tmp_path / "marks"
    _environment(monkeypatch, marks, {"gr-s1": "hold"})
    root = tmp_path / "slurm"
    comp = root / "t"
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(root), str(reg)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        _wait_for("gr-s1 held at step 2", lambda: (marks / "gr-s1.ready").is_file()
                  and bool((marks / "gr-s1.ready").read_text()) and driver.poll() is None)
    finally:
        driver.kill()
        driver.wait(timeout=30)
    job = (marks / "gr-s1.ready").read_text().split()[0]
    assert _job_file(comp, "gr-s1")["job_id"] == job and _live({job}) == {job}
    planned = _console()  # the job trains on with no driver: `ab plan` says so, not that it would resume it
    ab_plan("t", [], root=root, registry=reg, console=planned)
    assert re.search(r"gr-s1 .*running: being trained by pid \d+", planned.export_text()), planned.export_text()
    console = _console()
    release = threading.Timer(3.0, lambda: (marks / "gr-s1.go").write_text("go"))
    release.start()
    try:
        with watchdog(240):
            out = run_comparison("t", [], root=root, console=console, registry=reg, train_fn=planted,
                                 launch=_launch("time_min=10", "signal_delay_s=30")).plan.comp_dir
    finally:
        release.cancel()
    text = console.export_text()
    assert re.search(rf"gr-s1: running as slurm job {job}\b.*not submitting it again", text), text
    assert re.search(rf"gr-s1 \(slurm job {job}, adopted", text), text
    attempts = read_launch_record(out, "gr-s1")["attempts"]
    assert [(a["state"], a["job_id"]) for a in attempts] == [("done", job)], attempts  # once, in its first job
    assert _job_file(out, "gr-s1")["job_id"] == job and _job_file(out, "gr-s1")["state"] == "done"
    results = json.loads((out / "results.json").read_text())
    assert results["complete"], text
    a, b = _numbers(seq), _numbers(out)
    assert a == b, f"the adopted run differs from sequential: deviation={_deviation(a, b):.3g} bound=0\n{text}"
    assert _verdicts(out) == _verdicts(seq)



def _within_the_ddp_bound(one: dict[str, list[dict[str, Any]]], two: dict[str, list[dict[str, Any]]]) -> float:
    """The largest relative difference of loss and bpb between each run's rows, which tests/train/
    test_distributed.py bounds by 1e-4 for two gloo ranks against one process with the same global batch."""
    assert one.keys() == two.keys() and all(len(one[k]) == len(two[k]) for k in one), (one.keys(), two.keys())
    worst = 0.0
    for k in one:
        for a, b in zip(one[k], two[k]):
            assert a["step"] == b["step"], (k, a, b)
            for key in ("loss", "bpb"):
                if isinstance(a.get(key), float):
                    worst = max(worst, abs(b[key] - a[key]) / abs(a[key]))
    return worst


def test_slurm_a_run_of_two_ranks_trains_as_one_process_does_and_resumes_after_a_requeue(
        slurm: None, sequential: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """launcher.tasks_per_node=2 on CPU: each run is one job of two srun tasks, gloo DDP ranks meeting as
    torchrun's do (the path launcher.nodes_per_run > 1 takes across nodes); every run's loss and bpb match the
    one-process run within the DDP bound, and gr-s1, requeued at step 2 (`scontrol requeue`), resumes from its
    checkpoint in the requeued job."""
    from test_ab_launch import _console, _numbers

    reg, seq = sequential
    marks = tmp_path / "marks"
    _environment(monkeypatch, marks, {"gr-s1": "wait"})
    console = _console()
    actions = {"gr-s1": lambda job, pid: _run("scontrol", "requeue", job)}
    with Signaller(marks, actions) as signaller, watchdog(420):
        out = run_comparison("t", [], root=tmp_path / "slurm", console=console, registry=reg, train_fn=planted,
                             launch=_launch("tasks_per_node=2", "time_min=10", "signal_delay_s=30")).plan.comp_dir
    text = console.export_text()
    assert not signaller.errors and set(signaller.done) == {"gr-s1"}, (signaller.errors, text)
    assert json.loads((out / "results.json").read_text())["complete"], text
    deviation = _within_the_ddp_bound(_numbers(seq), _numbers(out))
    assert deviation <= 1e-4, f"two ranks differ from one process: deviation={deviation:.3g} bound=1e-4\n{text}"
    print(f"two ranks against one process: relative deviation {deviation:.3g} (bound 1e-4)")
    for run in ("rezero-s1", "gr-s1", "rezero-s2", "gr-s2"):  # each trained by two ranks, not one
        assert "# world_size: 2\n" in (out / run / "train.log").read_text(), run
    states = [a["state"] for a in read_launch_record(out, "gr-s1")["attempts"]]
    assert states[0] == "interrupted" and states[-1] == "done", states
    assert "resume step=2" in (out / "gr-s1" / "train.log").read_text()
