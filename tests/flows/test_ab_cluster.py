"""What the SLURM launcher makes of what SLURM says, without a cluster: the decisions of
dormouse/ab/launchers/cluster.py as pure functions, and the driver's poll loop and the job's own SIGTERM / requeue
handling with squeue, scontrol and the clock faked. The same behaviours against a real single-node SLURM:
tests/flows/test_ab_slurm.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import submitit

from dormouse.ab.launchers import cluster
from dormouse.ab.launchers.base import DONE, FAILED, INTERRUPTED, Job, LaunchError, Outcome
from dormouse.ab.launchers.cluster import (
    RunJob,
    SlurmLauncherConfig,
    SubmititLauncher,
    failure_reason,
    load_launcher_config,
    queue_verdict,
    requeue_went_through,
    requeued_by_slurm,
    stale_result,
)
from tests.helpers.ab_exit import exit_code

# --- what a queue state means ---------------------------------------------------------------------------


def test_a_job_squeue_does_not_list_and_sacct_does_not_know_is_absent_not_pending() -> None:
    """A run cancelled while pending: SLURM keeps no record (squeue lists nothing, sacct UNKNOWN), which
    submitit counts as unfinished forever."""
    assert queue_verdict("", "UNKNOWN", False) == "absent"
    assert queue_verdict("", "PENDING", False) == "absent"  # sacct's record lags; squeue is current
    assert queue_verdict("CANCELLED", "UNKNOWN", False) == "ended"
    assert queue_verdict("", "FAILED", False) == "ended"
    assert queue_verdict("", "CANCELLED by 0", False) == "ended"


def test_a_pending_running_completing_or_requeued_job_is_alive_and_a_result_wins() -> None:
    for state in ("PENDING", "RUNNING", "COMPLETING", "REQUEUED", "CONFIGURING", "SUSPENDED"):
        assert queue_verdict(state, "UNKNOWN", False) == "alive", state
    assert queue_verdict("CANCELLED", "CANCELLED", True) == "result"
    assert queue_verdict(None, "UNKNOWN", False) == "unsure"  # squeue did not answer: no evidence


def test_a_restart_count_that_went_up_is_a_requeue_and_one_that_did_not_is_a_cancel() -> None:
    """SLURM raises Restarts when it requeues, before the SIGTERM; a cancel leaves it (measured on
    slurm 22.05: ``scontrol show job`` in the job's SIGTERM trap said Restarts=1 / Restarts=0)."""
    assert requeued_by_slurm(0, {"JobState": "COMPLETING", "Restarts": "1"})
    assert not requeued_by_slurm(0, {"JobState": "COMPLETING", "Restarts": "0"})
    assert not requeued_by_slurm(2, {"Restarts": "2"})
    assert not requeued_by_slurm(0, None)
    assert stale_result(Outcome("p", INTERRUPTED, "", 143, {"restarts": 0}), {"Restarts": "1"})
    assert not stale_result(Outcome("p", INTERRUPTED, "", 143, {"restarts": 1}), {"Restarts": "1"})
    assert not stale_result(Outcome("p", INTERRUPTED, "", 143, {}), {"Restarts": "1"})  # no count recorded


def test_a_requeue_command_killed_by_its_own_requeue_went_through_only_if_the_count_went_up() -> None:
    assert requeue_went_through(-15, 0, {"Restarts": "1"})
    assert not requeue_went_through(-15, 0, {"Restarts": "0"})  # killed before the requeue: a real failure
    assert not requeue_went_through(1, 0, {"Restarts": "1"})  # scontrol refused: not our signal
    assert not requeue_went_through(-15, 0, None)


FAILED_TEXT = """Job (task=0) failed during processing with trace:
----------------------
Traceback (most recent call last):
  File "/usr/lib/python3/dist-packages/submitit/core/submission.py", line 55, in process_job
    result = delayed.result()
  File "/usr/lib/python3/dist-packages/submitit/slurm/slurm.py", line 190, in _requeue
    subprocess.check_call(["scontrol", "requeue", jid], timeout=60)
subprocess.CalledProcessError: Command '['scontrol', 'requeue', '3_1']' died with <Signals.SIGTERM: 15>.

----------------------
You can check full logs with 'job.stderr(0)' and 'job.stdout(0)'or at paths:
  - /c/submitit/3_1_0_log.err
  - /c/submitit/3_1_0_log.out"""

UNCOMPLETED_TEXT = """Job 3_2 (task: 0) with path /c/submitit/3_2_0_result.pkl
has not produced any output (state: CANCELLED by 0)
Error stream produced:
----------------------------------------
submitit INFO (2026-12-02 21:29:00,001) - Starting with JobEnvironment(job_id=3_2, hostname=vm)
slurmstepd-vm: error: *** JOB 6 ON vm CANCELLED AT 2026-12-02T21:29:02 ***
"""


def test_a_failure_names_its_reason_not_the_log_path() -> None:
    """A failure's reason is the error itself, not its last line (always a log path)."""
    assert failure_reason(FAILED_TEXT) == ("subprocess.CalledProcessError: Command '['scontrol', 'requeue', "
                                           "'3_1']' died with <Signals.SIGTERM: 15>.")
    reason = failure_reason(UNCOMPLETED_TEXT)
    assert "has not produced any output" in reason and "CANCELLED AT" in reason and "/c/submitit" not in reason


def test_lost_after_s_is_a_launcher_field_and_must_not_be_negative() -> None:
    assert load_launcher_config("slurm").lost_after_s == SlurmLauncherConfig().lost_after_s > 0
    assert load_launcher_config("slurm", ["lost_after_s=20"]).lost_after_s == 20
    with pytest.raises(LaunchError, match="lost_after_s"):
        load_launcher_config("slurm", ["lost_after_s=-1"])


# --- the driver's poll loop, squeue and the clock faked --------------------------------------------------

class FakePaths:
    def __init__(self, folder: Path, job_id: str) -> None:
        self.result_pickle = folder / f"{job_id}_0_result.pkl"
        self.stderr = folder / f"{job_id}_0_log.err"


class FakeJob:
    """Enough of a submitit SlurmJob for the poll loop: its id, paths, sacct state and result."""

    def __init__(self, folder: Path, job_id: str, outcome: Outcome | None = None) -> None:
        self.job_id, self.paths, self.outcome = job_id, FakePaths(folder, job_id), outcome
        self.state = "UNKNOWN"

    def task(self, i: int) -> FakeJob:
        return self

    def results(self) -> list[Outcome]:
        assert self.outcome is not None
        return [self.outcome]

    def finish(self, outcome: Outcome) -> None:
        self.outcome = outcome
        self.paths.result_pickle.write_bytes(b"result")

    def cancel(self, check: bool = True) -> None:
        self.cancelled = True


class Clock:
    """time.monotonic / time.sleep for the launcher: sleeping advances the clock; a loop that polls past
    ``limit`` seconds is a hang."""

    def __init__(self, limit: float, on_sleep: Any = None) -> None:
        self.now, self.limit, self.on_sleep = 0.0, limit, on_sleep

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s
        if self.on_sleep:
            self.on_sleep(self.now)
        if self.now > self.limit:
            raise AssertionError(f"the driver still waits after {self.now:g} s: a hang")


def _launcher(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, clock: Clock, queue: Any,
              info: Any = None, comp_dir: Path | None = None, **config: Any) -> SubmititLauncher:
    monkeypatch.setattr(cluster, "check_cluster", lambda c: None)  # no srun needed: nothing is submitted
    monkeypatch.setattr(cluster, "time", clock)
    monkeypatch.setattr(cluster, "squeue_states", queue)
    monkeypatch.setattr(cluster, "slurm_job_info", info or (lambda job_id: None))
    return SubmititLauncher(SlurmLauncherConfig(poll_s=10, **config), tmp_path, "ab-t", comp_dir)


def test_a_run_cancelled_while_pending_is_failed_after_lost_after_s_not_waited_on_forever(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Job 3_1 runs and finishes; 3_2 is cancelled while pending (squeue stops listing it, sacct never
    knew it): it is failed, with a line that says why, after lost_after_s."""
    jobs = [FakeJob(tmp_path, "3_1"), FakeJob(tmp_path, "3_2")]

    def queue() -> dict[str, str]:
        return {"3_1": "RUNNING"} if clock.now < 30 else {"3_1": "COMPLETED"}

    def progress(now: float) -> None:
        if now >= 30 and jobs[0].outcome is None:
            jobs[0].finish(Outcome("a-s1", DONE))

    clock = Clock(limit=600, on_sleep=progress)
    launcher = _launcher(monkeypatch, tmp_path, clock, queue, lost_after_s=120)
    finished: list[Outcome] = []
    outcomes = launcher.wait([(Job("a-s1", print), jobs[0]), (Job("a-s2", print), jobs[1])], finished.append)
    by_key = {o.key: o for o in outcomes}
    assert by_key["a-s1"].status == DONE
    lost = by_key["a-s2"]
    assert lost.status == FAILED and "job 3_2" in lost.note and "no record" in lost.note
    assert "lost_after_s" in lost.note
    assert 120 <= clock.now <= 140  # failed once lost_after_s had passed, not before, not much after
    assert [o.key for o in finished] == ["a-s1", "a-s2"]


def test_a_job_that_died_without_a_result_is_failed_and_a_job_squeue_cannot_see_is_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A job killed without a result (squeue: FAILED) is failed after lost_after_s; while squeue does not
    answer at all, nothing is failed (no evidence), and the clock restarts once it answers; the driver says
    that it is waiting on a silent controller every lost_after_s, never in silence."""
    job = FakeJob(tmp_path, "4")
    job.paths.stderr.write_text("submitit INFO - Starting\nsrun: error: vm: task 0: Killed\n\n")
    answers: list[dict[str, str] | None] = [None] * 30 + [{"4": "FAILED"}] * 100

    def queue() -> dict[str, str] | None:
        return answers.pop(0)

    clock = Clock(limit=2000)
    launcher = _launcher(monkeypatch, tmp_path, clock, queue, lost_after_s=60)
    [outcome] = launcher.wait([(Job("b-s1", print), job)], lambda o: None)
    assert outcome.status == FAILED and "ended (FAILED) without a result" in outcome.note
    assert "its log ends: srun: error: vm: task 0: Killed" in outcome.note  # the reason, then where to look
    assert 300 + 60 <= clock.now <= 300 + 80
    said = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("squeue has not answered for")]
    assert len(said) == 4 and "still waiting" in said[0]  # at 60, 130, 200 and 270 s of the 300 s of silence


def test_a_result_written_before_a_requeue_is_set_aside_and_the_requeued_job_waited_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job returned interrupted (SIGTERM, 143) and SLURM then requeued it (its restart count went
    up): the driver keeps waiting, and reports the requeued job's outcome."""
    job = FakeJob(tmp_path, "5_0")
    job.finish(Outcome("c-s1", INTERRUPTED, "interrupted (SIGTERM); rerun to resume", 143, {"restarts": 0}))

    def progress(now: float) -> None:
        if now >= 50 and job.outcome is not None and job.outcome.status == INTERRUPTED:
            job.finish(Outcome("c-s1", DONE, "resumed from its checkpoint", None, {"restarts": 1}))

    clock = Clock(limit=600, on_sleep=progress)
    launcher = _launcher(monkeypatch, tmp_path, clock, lambda: {"5_0": "PENDING"},
                         info=lambda job_id: {"JobState": "PENDING", "Restarts": "1"}, lost_after_s=30)
    [outcome] = launcher.wait([(Job("c-s1", print), job)], lambda o: None)
    assert outcome.status == DONE and outcome.note == "resumed from its checkpoint"
    assert (tmp_path / "5_0_0_result.pkl.before-restart-0").is_file()


def test_an_interrupted_result_of_a_cancelled_job_is_the_outcome(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    job = FakeJob(tmp_path, "6")
    job.finish(Outcome("d-s1", INTERRUPTED, "interrupted (SIGTERM); rerun to resume", 143, {"restarts": 0}))
    clock = Clock(limit=60)
    launcher = _launcher(monkeypatch, tmp_path, clock, lambda: {"6": "CANCELLED"},
                         info=lambda job_id: {"JobState": "CANCELLED", "Restarts": "0"})
    [outcome] = launcher.wait([(Job("d-s1", print), job)], lambda o: None)
    assert outcome.status == INTERRUPTED and outcome.exit_code == 143


class FakeExecutor:
    """submitit's executor for the launcher's run(): each submit returns the next FakeJob."""

    def __init__(self, jobs: list[FakeJob]) -> None:
        self.jobs = list(jobs)

    def batch(self) -> Any:
        import contextlib

        return contextlib.nullcontext()

    def submit(self, job: RunJob) -> FakeJob:
        return self.jobs.pop(0)


@pytest.mark.parametrize("when", ["submitting", "waiting"])
def test_a_sigterm_to_the_driver_cancels_every_job_waits_for_their_checkpoints_and_exits_143(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str) -> None:
    """`kill -TERM` of the driver (a batch system's stop, `timeout`, a logout) stops its jobs as Ctrl-C does,
    whether it lands while the jobs are submitted or while they train: every unfinished job is cancelled, the
    driver waits for each cancelled job's result (the run checkpointed at its next step), records it, and
    stops with 143, inside the runner's own SIGTERM handler as in `dormouse ab`."""
    from dormouse.ab.comparison.runner import stop_on_term
    from dormouse.errors import Interrupted

    jobs = [FakeJob(tmp_path, "7_0"), FakeJob(tmp_path, "7_1")]
    jobs[0].finish(Outcome("h-s1", DONE))  # finished before the signal: its outcome stands

    def queue() -> dict[str, str]:
        for job in jobs[1:]:
            if getattr(job, "cancelled", False) and job.outcome is None:  # checkpoints at its next step
                job.finish(Outcome("h-s2", INTERRUPTED, "interrupted at step 2; checkpoint", 143))
        return {j.job_id: "CANCELLED" if getattr(j, "cancelled", False) else "RUNNING" for j in jobs}

    def term_at(now: float) -> None:
        if when == "waiting" and now >= 20:
            os.kill(os.getpid(), signal.SIGTERM)

    def on_start(key: str, where: str) -> None:
        if when == "submitting" and key == "h-s2":
            os.kill(os.getpid(), signal.SIGTERM)

    clock = Clock(limit=600, on_sleep=term_at)
    launcher = _launcher(monkeypatch, tmp_path, clock, queue, comp_dir=tmp_path / "comp")
    monkeypatch.setattr(cluster, "make_executor", lambda *a: FakeExecutor(jobs))
    finished: list[Outcome] = []
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted), stop_on_term(lambda: None):
        outcomes = launcher.run([Job("h-s1", print), Job("h-s2", print)], on_start, finished.append)
        raise Interrupted(launcher.stopped_by or 0, "stopped")
    assert signal.getsignal(signal.SIGTERM) is before
    assert launcher.stopped_by == 143
    assert jobs[1].cancelled
    by_key = {o.key: o for o in outcomes}
    assert by_key["h-s1"].status == DONE
    assert by_key["h-s2"].status == INTERRUPTED and "checkpoint" in by_key["h-s2"].note, by_key["h-s2"]
    assert [o.key for o in finished] == [o.key for o in outcomes]
    record = json.loads((tmp_path / "comp" / "launch" / "h-s2.job.json").read_text())
    assert record["job_id"] == "7_1" and record["state"] == INTERRUPTED


def test_a_rerun_adopts_the_job_a_killed_driver_left_in_the_queue_and_submits_only_the_others(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job files of a killed driver name 9_0 (squeue: RUNNING) and 9_1 (COMPLETED, its run not done):
    the rerun says it waits for 9_0, adopts it instead of submitting i-s1 again (a duplicate would fail on
    the run's lock), counts its result, and submits only i-s2."""
    comp = tmp_path / "comp"
    (comp / "launch").mkdir(parents=True)
    for key, job_id in (("i-s1", "9_0"), ("i-s2", "9_1")):
        (comp / "launch" / f"{key}.job.json").write_text(json.dumps(
            {"job_id": job_id, "cluster": "slurm", "folder": str(tmp_path), "state": "submitted"}))
    old, new = FakeJob(tmp_path, "9_0"), FakeJob(tmp_path, "10_0")
    monkeypatch.setattr(cluster.submitit, "SlurmJob", lambda folder, job_id, tasks: {"9_0": old}[job_id])

    def queue() -> dict[str, str]:
        return {"9_0": "RUNNING" if clock.now < 20 else "COMPLETED", "9_1": "COMPLETED", "10_0": "RUNNING"}

    def progress(now: float) -> None:
        if now >= 20 and old.outcome is None:
            old.finish(Outcome("i-s1", DONE, "trained by the killed driver's job"))
            new.finish(Outcome("i-s2", DONE))

    clock = Clock(limit=600, on_sleep=progress)
    launcher = _launcher(monkeypatch, tmp_path, clock, queue, comp_dir=comp)
    monkeypatch.setattr(cluster, "make_executor", lambda *a: FakeExecutor([new]))  # a second submit: IndexError
    said = launcher.adoptable(["i-s1", "i-s2"])
    assert list(said) == ["i-s1"] and "job 9_0" in said["i-s1"] and "not submitting it again" in said["i-s1"]
    starts: list[tuple[str, str]] = []
    outcomes = launcher.run([Job("i-s1", print), Job("i-s2", print)], lambda k, w: starts.append((k, w)),
                            lambda o: None)
    assert starts == [("i-s1", "slurm job 9_0, adopted (RUNNING)"), ("i-s2", "slurm job 10_0")]
    by_key = {o.key: o for o in outcomes}
    assert by_key["i-s1"].status == DONE and by_key["i-s1"].note == "trained by the killed driver's job"
    files = {k: json.loads((comp / "launch" / f"{k}.job.json").read_text()) for k in ("i-s1", "i-s2")}
    assert (files["i-s1"]["job_id"], files["i-s1"]["state"]) == ("9_0", DONE)
    assert (files["i-s2"]["job_id"], files["i-s2"]["state"]) == ("10_0", DONE)


# --- inside the job: SIGTERM requeue, submitit's requeue race, the job id ---------------------------------

ARRAY_TASK_ENV = {"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "5", "SLURM_ARRAY_JOB_ID": "3",
                  "SLURM_ARRAY_TASK_ID": "1", "SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
                  "SLURM_NODEID": "0", "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "vm"}


def _in_an_array_task(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, restarts: int = 0) -> None:
    for k, v in {**ARRAY_TASK_ENV, "SUBMITIT_FOLDER": str(tmp_path),
                 "SLURM_RESTART_COUNT": str(restarts)}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("DORMOUSE_JOB_ID", raising=False)
    # RunJob installs the requeue that survives its own SIGTERM; undo that after the test.
    monkeypatch.setattr(submitit.slurm.slurm.SlurmJobEnvironment, "_requeue",
                        submitit.slurm.slurm.SlurmJobEnvironment._requeue)


def _sigterm_pair() -> Outcome:
    from dormouse.ab.runs.job import _where

    return Outcome("e-s1", INTERRUPTED, "interrupted (SIGTERM); rerun to resume", 128 + int(signal.SIGTERM),
                   {"recorded_job_id": _where()["job_id"]})


def test_a_sigterm_that_was_a_requeue_ends_the_job_without_a_result(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """scontrol requeue and PreemptMode=REQUEUE send SIGTERM: the run checkpoints and returns 143, and the
    job ends without a result so that the requeued job resumes it."""
    _in_an_array_task(monkeypatch, tmp_path)
    monkeypatch.setattr(cluster, "slurm_job_info", lambda job_id: {"JobState": "COMPLETING", "Restarts": "1"})
    with pytest.raises(SystemExit):
        RunJob(_sigterm_pair, (), None)()


def test_a_sigterm_that_was_a_cancel_returns_interrupted_with_the_boards_job_id(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancel (restart count unchanged) returns the interrupted outcome; the attempt record's job id is
    the array task's as the board shows it, 3_1, not SLURM_JOB_ID's 5."""
    _in_an_array_task(monkeypatch, tmp_path)
    monkeypatch.setattr(cluster, "slurm_job_info", lambda job_id: {"JobState": "COMPLETING", "Restarts": "0"})
    outcome = RunJob(_sigterm_pair, (), None)()
    assert outcome.status == INTERRUPTED and outcome.exit_code == 143
    assert outcome.where["recorded_job_id"] == "3_1" and outcome.where["job_id"] == "3_1"
    assert outcome.where["restarts"] == 0


def test_submitits_requeue_killed_by_its_own_sigterm_is_a_requeue_not_a_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`scontrol requeue` killed by the SIGTERM of the requeue it asked for (1 requeue in 13 on a real
    cluster): the job is requeued, so the job's requeue succeeds; when the count did not go up, the
    error is raised."""
    _in_an_array_task(monkeypatch, tmp_path)
    RunJob(lambda: Outcome("f-s1", DONE), (), None)()  # installs the job's requeue
    env = submitit.JobEnvironment()
    calls: list[list[str]] = []

    def killed(cmd: list[str], timeout: float) -> None:
        calls.append(cmd)
        raise subprocess.CalledProcessError(-int(signal.SIGTERM), cmd)

    monkeypatch.setattr(cluster.subprocess, "check_call", killed)
    # The first `scontrol show job` dies of the same SIGTERM wave (no answer); the second says Restarts=1.
    answers: list[dict[str, str] | None] = [None, {"JobState": "PENDING", "Restarts": "1"}]
    monkeypatch.setattr(cluster, "slurm_job_info", lambda job_id: answers.pop(0))
    env._requeue(3)
    assert calls == [["scontrol", "requeue", "3_1"]] and not answers
    monkeypatch.setattr(cluster, "slurm_job_info", lambda job_id: {"JobState": "RUNNING", "Restarts": "0"})
    with pytest.raises(subprocess.CalledProcessError):
        env._requeue(3)


def test_off_slurm_the_job_records_no_restart_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ARRAY_TASK_ENV:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.delenv("DORMOUSE_JOB_ID", raising=False)  # RunJob sets it: undone after the test
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "local")
    monkeypatch.setenv("SUBMITIT_LOCAL_JOB_ID", "77")
    monkeypatch.setenv("SUBMITIT_FOLDER", str(tmp_path))
    for k, v in {"SUBMITIT_LOCAL_NTASKS": "1", "SUBMITIT_LOCAL_GLOBALID": "0", "SUBMITIT_LOCAL_LOCALID": "0",
                 "SUBMITIT_LOCAL_NODEID": "0", "SUBMITIT_LOCAL_NNODES": "1"}.items():
        monkeypatch.setenv(k, v)
    outcome = RunJob(lambda: Outcome("g-s1", DONE), (), None)()
    assert outcome.where["job_id"] == "77" and "restarts" not in outcome.where
    assert os.environ["DORMOUSE_JOB_ID"] == "77"


def test_slurm_off_a_cluster_is_refused_even_on_a_machine_with_slurm_installed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--launcher slurm` off a cluster is refused before anything is written, naming the way to run the same
    jobs here; submitit is told there is no `srun`, so the test runs on a machine with SLURM installed too (CI
    installs it for tests/flows/test_ab_slurm.py)."""
    from test_ab_launch import _console, _registry

    from dormouse.ab.comparison.command import ab_run
    from dormouse.ab.launchers.request import LaunchRequest

    monkeypatch.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: -1))
    err = _console()
    code = exit_code(ab_run, "t", [], root=tmp_path / "ab", registry=_registry(tmp_path), console=_console(),
                     err=err, launch=LaunchRequest(launcher="slurm"))
    text = err.export_text()
    assert code == 2 and "srun" in text and "launcher.cluster=local" in text
    assert not (tmp_path / "ab").exists()


# --- launcher.cluster=local on a small machine ----------------------------------------------------------

def test_local_cluster_jobs_never_start_more_threads_than_cores() -> None:
    from dormouse.ab.launchers.local import cluster_share, local_cluster_share

    for cores in (1, 2, 3, 8, 16):
        for cpus, most_jobs in ((8, 64), (1, 64), (4, 2)):
            width, threads = local_cluster_share(cores, tasks=1, most_jobs=most_jobs, most_threads=cpus)
            assert 1 <= width <= most_jobs and 1 <= threads <= cpus and width * threads <= cores
    assert local_cluster_share(2, tasks=1, most_jobs=64, most_threads=8) == (2, 1)  # like --jobs 2
    assert local_cluster_share(16, tasks=1, most_jobs=2, most_threads=8) == (2, 8)
    assert cluster_share(SlurmLauncherConfig(cluster="slurm"), cores=2) == (None, 8)  # SLURM allocates


def test_local_cluster_jobs_run_in_waves_of_the_machines_share_and_a_stop_starts_no_wave(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dormouse.ab.launchers.local.available_cores", lambda: 2)
    launcher = SubmititLauncher(SlurmLauncherConfig(cluster="local", gpus_per_run=0), tmp_path, "ab-t")
    assert (launcher.at_once, launcher.threads) == (2, 1)
    assert launcher.settings()["threads_per_pair"] == 1 and launcher.settings()["jobs"] == 2

    class Executor:
        submitted: list[Any] = []

        def batch(self) -> Any:
            import contextlib

            return contextlib.nullcontext()

        def submit(self, job: RunJob) -> Any:
            self.submitted.append(job)
            return type("Submitted", (), {"job_id": str(len(self.submitted))})()

    waves: list[list[str]] = []

    def wait(submitted: Any, on_finish: Any) -> list[Outcome]:
        waves.append([job.key for job, _ in submitted])
        if len(waves) == 2:
            launcher.stopped_by = 130  # Ctrl-C during the second wave
        outcomes = [Outcome(job.key, DONE) for job, _ in submitted]
        for outcome in outcomes:
            on_finish(outcome)
        return outcomes

    monkeypatch.setattr(cluster, "make_executor", lambda *a: Executor())
    monkeypatch.setattr(launcher, "wait", wait)
    jobs = [Job(f"p{i}", print, ()) for i in range(7)]
    outcomes = launcher.run(jobs, lambda key, where: None, lambda o: None)
    assert waves == [["p0", "p1"], ["p2", "p3"]] and len(outcomes) == 4
    assert {job.threads for job in Executor.submitted} == {1}


# --- what `ab status` and `ab plan` say of runs the driver failed or a job trains ---------------------------

def test_status_shows_failed_for_runs_the_driver_failed_and_plan_shows_a_run_being_trained_as_running(
        tmp_path: Path) -> None:
    """gr-s2 checkpointed at step 10 and its job then timed out too many times; rezero-s2's job was killed at
    start (no attempt). The driver failed both (their job files): `ab status` says failed with the driver's
    reason, not interrupted or pending. While a job holds gr-s2's lock, `ab plan` and `ab status` say it is
    running, by whom, not that it would be resumed."""
    from datetime import datetime

    from test_ab import SPEC
    from test_ab_launch import _console, _registry

    from dormouse.ab.comparison.command import ab_plan
    from dormouse.ab.comparison.questions import status_command
    from dormouse.ab.comparison.runner import run_comparison
    from dormouse.run.files import ComparisonFiles
    from dormouse.run.lock import run_lock
    from tests.helpers.fake_train import FakeTrain

    reg, root = _registry(tmp_path, SPEC), tmp_path / "ab"
    run_comparison("t", [], root=root, registry=reg, console=_console(),
                   train_fn=FakeTrain(stop_at={"gr-s2": 10, "rezero-s2": 10}))
    files = ComparisonFiles(root / "t")
    record = json.loads(files.launch_record("gr-s2").read_text())
    record["attempts"][-1].update(state=INTERRUPTED, note="interrupted (SIGUSR2); rerun to resume")
    files.launch_record("gr-s2").write_text(json.dumps(record))
    files.launch_record("rezero-s2").unlink()
    ended = datetime.now().isoformat(timespec="seconds")
    for run, job_id, note in (("gr-s2", "3_1", "job 3_1 (state TIMEOUT now): timed-out too many times"),
                              ("rezero-s2", "3_2", "job 3_2: it ended (FAILED) without a result")):
        files.launch_job(run).write_text(json.dumps({"job_id": job_id, "cluster": "slurm", "state": FAILED,
                                                     "note": note, "ended": ended}))

    def said(verb: Any) -> dict[str, str]:
        console = _console()
        verb("t", **({"overrides": []} if verb is ab_plan else {}), root=root, registry=reg, console=console)
        return {ln.split()[1] if ln.startswith("│") else ln.split()[0]: ln
                for ln in console.export_text().splitlines() if "-s2 " in ln}

    rows = said(status_command)
    assert "failed" in rows["gr-s2"] and "timed-out too many times" in rows["gr-s2"], rows
    assert "failed" in rows["rezero-s2"] and "without a result" in rows["rezero-s2"], rows
    files.launch_job("gr-s2").write_text(json.dumps({"job_id": "4_1", "cluster": "slurm", "state": "submitted"}))
    lock = run_lock(root / "t", "gr-s2").acquire()  # the rerun's job trains it
    try:
        planned, rows = said(ab_plan), said(status_command)
    finally:
        lock.release()
    assert f"running: being trained by pid {os.getpid()}" in planned["gr-s2"], planned
    assert "resum" not in planned["gr-s2"], planned
    assert "running" in rows["gr-s2"] and "job 4_1" in rows["gr-s2"], rows


# --- smaller things an operator meets -----------------------------------------------------------------------

def test_a_signal_delay_that_leaves_a_job_no_time_to_take_the_signal_is_refused() -> None:
    """SLURM's warning comes up to a minute early: time_min=1 with signal_delay_s=30 could signal a job as it
    starts, before the run can checkpoint (a job was killed 4 s in); refused, saying what would do."""
    with pytest.raises(LaunchError, match=r"time_min=1: SLURM sends the warning signal up to 60 s early.*"
                                          r"use launcher.time_min >= 3"):
        load_launcher_config("slurm", ["time_min=1", "signal_delay_s=30"])
    load_launcher_config("slurm", ["time_min=4", "signal_delay_s=120"])  # a minute in at the earliest


def test_a_queued_job_is_started_on_the_board_only_once_squeue_lists_it_running(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = FakeJob(tmp_path, "11_0")

    def queue() -> dict[str, str]:
        if clock.now >= 60 and job.outcome is None:
            job.finish(Outcome("j-s1", DONE))
        return {"11_0": "PENDING" if clock.now < 30 else "RUNNING"}

    clock = Clock(limit=600)
    launcher = _launcher(monkeypatch, tmp_path, clock, queue)
    monkeypatch.setattr(cluster, "make_executor", lambda *a: FakeExecutor([job]))
    events: list[tuple[str, float]] = []
    launcher.run([Job("j-s1", print)], lambda key, where: events.append((f"start {where}", clock.now)),
                 lambda o: events.append((o.status, clock.now)))
    assert events == [("start slurm job 11_0", 30), (DONE, 60)]


def test_a_failed_job_names_a_final_state_and_a_log_that_exists_or_says_there_is_none(tmp_path: Path) -> None:
    """The failure line of a job whose result says it failed while SLURM still lists it RUNNING (it is ending)
    names no state; a log that does not exist is not given as the place to look."""
    job = FakeJob(tmp_path, "12_0")
    job.state = "RUNNING"

    def raised() -> list[Outcome]:
        rule = "-" * 22
        raise submitit.core.utils.FailedJobError(f"Job (task=0) failed during processing with trace:\n{rule}\n"
                                                 "Traceback\n  x\nRuntimeError: timed-out too many times\n"
                                                 f"{rule}\nYou can check full logs")

    job.results = raised  # type: ignore[method-assign]
    outcome = cluster._outcome_of(Job("k-s1", print), job)
    assert outcome.status == FAILED and "RUNNING" not in outcome.note, outcome.note
    assert outcome.note.startswith("job 12_0: RuntimeError: timed-out too many times"), outcome.note
    assert f"no log at {job.paths.stderr} (the job never started" in outcome.note
    job.paths.stderr.write_text("submitit INFO\n")
    job.state = "TIMEOUT"
    outcome = cluster._outcome_of(Job("k-s1", print), job)
    assert "(state TIMEOUT now)" in outcome.note and outcome.note.endswith(f"its log: {job.paths.stderr}")


def test_a_job_lost_after_its_runs_final_eval_is_done_at_once_not_failed_after_lost_after_s(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second USR2 killed the requeued job after the run's final eval: squeue says FAILED, no result. The
    run is complete on disk, so the driver says so at its next poll instead of waiting 300 s to fail it."""
    job = FakeJob(tmp_path, "13_0")
    clock = Clock(limit=600)
    launcher = _launcher(monkeypatch, tmp_path, clock, lambda: {"13_0": "FAILED"}, lost_after_s=300)
    [outcome] = launcher.wait([(Job("l-s1", print, (), lambda: True), job)], lambda o: None)
    assert outcome.status == DONE and "complete on disk" in outcome.note and clock.now < 30, (outcome, clock.now)
    [outcome] = launcher.wait([(Job("l-s2", print, (), lambda: False), FakeJob(tmp_path, "13_1"))], lambda o: None)
    assert outcome.status == FAILED  # not complete: lost, after lost_after_s, as before


def test_a_run_complete_on_disk_counts_though_its_job_was_failed_after_its_final_eval(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gr-s1's job is failed by the driver after the run wrote its final eval (a second USR2 killed the
    requeued job; the job lost without a result): the run is complete on disk, so it counts, with a note,
    and the comparison completes."""
    from test_ab import SPEC
    from test_ab_launch import _console, _registry

    from dormouse.ab.comparison import runner
    from tests.helpers.fake_train import FakeTrain

    def job_lost_after_training(task: Any) -> Outcome:
        outcome = train_run(task)
        if outcome.key == "gr-s1":
            return Outcome("gr-s1", FAILED, "job 3_1: it ended (FAILED) without a result, for 300 s")
        return outcome

    train_run = runner.train_run
    monkeypatch.setattr(runner, "train_run", job_lost_after_training)
    console = _console()
    results = runner.run_comparison("t", [], root=tmp_path / "ab", registry=_registry(tmp_path, SPEC),
                                    console=console, train_fn=FakeTrain())
    text = console.export_text()
    assert results.complete, text
    assert "gr-s1: failed (job 3_1: it ended (FAILED) without a result, for 300 s), but its final eval is on disk" \
        in text, text


# --- one run across several ranks or nodes --------------------------------------------------------------------

def test_a_run_spans_nodes_per_run_nodes_with_a_rank_per_gpu_or_tasks_per_node_and_asks_gpus_the_sites_way(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One run, one job: nodes_per_run nodes of ranks_per_node srun tasks (one per GPU; tasks_per_node on
    CPU), the GPUs asked for as --gpus-per-node or --gres; what cannot be honoured is refused, each in a line."""
    # submitit is told that `srun` is there (nothing is submitted): the executor is built on any machine
    monkeypatch.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: 1))

    def params(*overrides: str) -> dict[str, Any]:
        return cluster.make_executor(load_launcher_config("slurm", overrides), tmp_path, "ab-t").parameters

    gpu = params("nodes_per_run=2", "gpus_per_run=4")
    assert (gpu["nodes"], gpu["ntasks_per_node"], gpu["gpus_per_node"]) == (2, 4, 4) and "gres" not in gpu
    gres = params("nodes_per_run=2", "gpus_per_run=4", "gpus_as=gres")
    assert gres["gres"] == "gpu:4" and "gpus_per_node" not in gres
    cpu = params("gpus_per_run=0", "tasks_per_node=2")
    assert (cpu["nodes"], cpu["ntasks_per_node"]) == (1, 2) and "gpus_per_node" not in cpu
    assert cpu["wckey"] == "submitit" and params("wckey=null")["wckey"] is None  # no --wckey
    for bad, said in ((["gpus_per_run=2", "tasks_per_node=3"], "one rank per GPU"),
                      (["cluster=local", "nodes_per_run=2"], "this machine is one node"),
                      (["gpus_as=gpus"], "one of gpus_per_node, gres"), (["nodes_per_run=0"], "must be >= 1")):
        with pytest.raises(LaunchError, match=said):
            load_launcher_config("slurm", bad)
