"""How the runs run: --jobs N in worker processes gives the sequential numbers bit for bit, submitit's
local executor (real processes, no SLURM) submits, completes, requeues a preempted job that resumes
from its checkpoint, and reports; slots, the launcher config, the comparison and run locks in the
runner, --plan, --status, the live board, errors said once, and a killed driver that leaves no process."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig
from rich.console import Console

from dormouse.ab.comparison.command import ab_plan, ab_run
from dormouse.ab.comparison.questions import status_command
from dormouse.ab.comparison.registry import ComparisonError
from dormouse.ab.comparison.runner import run_comparison
from dormouse.ab.launchers.base import DONE, INTERRUPTED, Job, LaunchError, Outcome
from dormouse.ab.launchers.cluster import load_launcher_config
from dormouse.ab.launchers.local import WORKER_PRELOAD, ProcessLauncher, plan_slots, worker_context
from dormouse.ab.launchers.request import LaunchRequest
from dormouse.ab.runs.job import read_launch_record
from dormouse.arms.plugin_routes import ENV_VAR
from tests.helpers.ab_exit import exit_code

TESTS = Path(__file__).resolve().parent

# Two arms, two seeds of the tiny model, 4 steps: seconds of training, real runs.
REAL = """\
protocol: 2
name: t
baseline: rezero
sesoi: 0.01
looks: [2]
init_seed_base: 1
data_seed_base: 1
pilot_sd: 0.01
expected_effect: -0.02
fixed: [preset=tiny, train.steps=4, train.eval_every=2, data.eval_bytes=512, train.device=cpu,
        logging.progress=off]
arms:
  rezero: []
  gr: [model.use_gr=true]
"""
TIMING = {"tok/s", "time_s", "peak_mem_bytes"}  # what may differ between two runs of the same run


def _registry(tmp_path: Path, text: str = REAL) -> Path:
    reg = tmp_path / "registry"
    reg.mkdir(exist_ok=True)
    (reg / "t.yaml").write_text(text)
    return reg


def _numbers(comp_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Every run's metrics rows, timings dropped."""
    out = {}
    for d in sorted(p for p in comp_dir.iterdir() if (p / "metrics.jsonl").is_file()):
        rows = [json.loads(ln) for ln in (d / "metrics.jsonl").read_text().splitlines()]
        out[d.name] = [{k: v for k, v in r.items() if k not in TIMING} for r in rows]
    return out


def _deviation(a: dict[str, list[dict[str, Any]]], b: dict[str, list[dict[str, Any]]]) -> float:
    """The largest |difference| between two runs' numbers (inf when their shapes differ)."""
    if a.keys() != b.keys() or any(len(a[k]) != len(b[k]) for k in a):
        return float("inf")
    worst = 0.0
    for k in a:
        for ra, rb in zip(a[k], b[k]):
            for key in ra.keys() | rb.keys():
                x, y = ra.get(key), rb.get(key)
                if isinstance(x, (int, float)) and isinstance(y, (int, float)):
                    worst = max(worst, abs(float(x) - float(y)))
                elif x != y:
                    return float("inf")
    return worst


def _verdicts(comp_dir: Path) -> dict[str, Any]:
    arms = json.loads((comp_dir / "results.json").read_text())["arms"]
    return {a: (v["verdict"], v["final_bpb"], v["diffs"]) for a, v in arms.items()}


def _console() -> Console:
    return Console(record=True, width=200)


# --- slots and the launcher config ----------------------------------------------------------------------

def test_slots_share_the_cores_and_refuse_what_cannot_be_honoured() -> None:
    assert [s.threads for s in plan_slots(2, cuda=False, cores=16)] == [8, 8]
    assert [s.threads for s in plan_slots(3, cuda=False, cores=16)] == [5, 5, 5]  # 16 // 3, never more
    assert [s.threads for s in plan_slots(2, cuda=False, cores=16, threads=3)] == [3, 3]
    slots = plan_slots(4, cuda=True, cores=32, devices=[0, 1, 2, 3])
    assert [s.cuda_devices for s in slots] == [(0,), (1,), (2,), (3,)] and slots[0].threads == 8
    with pytest.raises(LaunchError, match="each job needs its own GPU and 2 are visible"):
        plan_slots(4, cuda=True, cores=32, devices=[0, 1])
    with pytest.raises(LaunchError, match="--jobs 4 on a CPU with 2 core"):
        plan_slots(4, cuda=False, cores=2)


def test_launcher_config_comes_from_the_config_group_and_the_command_line() -> None:
    c = load_launcher_config("slurm")
    assert c.cluster == "slurm" and c.gpus_per_run == 1 and c.time_min > 0
    c = load_launcher_config("slurm", ["partition=gpu", "time_min=30", "gpus_per_run=4"])
    assert (c.partition, c.time_min, c.gpus_per_run) == ("gpu", 30, 4)
    with pytest.raises(LaunchError) as info:
        load_launcher_config("slurm", ["partion=gpu", "time_min=soon", "cluster=pbs"])
    text = str(info.value)
    assert "launcher.partion" in text and "launcher.time_min" in text
    with pytest.raises(LaunchError, match="no dormouse.conf/launcher/pbs.yaml"):
        load_launcher_config("pbs")


@pytest.fixture(scope="module")
def sequential(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The REAL comparison run in this process, one run after another at one thread: the numbers the other
    launch paths must equal. Its comparison directory; read, never written."""
    root = tmp_path_factory.mktemp("sequential")
    return run_comparison("t", [], root=root / "seq", console=_console(), registry=_registry(root),
                          launch=LaunchRequest(jobs=1, threads=1)).plan.comp_dir


# --- --jobs ---------------------------------------------------------------------------------------------

def test_parallel_runs_equal_the_sequential_runs_bit_for_bit(tmp_path: Path, sequential: Path) -> None:
    """`--jobs 2` runs each run in a worker process beside another; with the same per-run thread count
    (1) every run's losses and bpb, and so every verdict number, equal the sequential run's exactly."""
    reg = _registry(tmp_path)
    seq = sequential
    par = run_comparison("t", [], root=tmp_path / "par", console=_console(), registry=reg,
                         launch=LaunchRequest(jobs=2, threads=1)).plan.comp_dir
    a, b = _numbers(seq), _numbers(par)
    assert set(a) == {"rezero-s1", "gr-s1", "rezero-s2", "gr-s2"}
    # Bound 0: the same ops in the same order on one thread give the same bits; any difference is a leak.
    assert a == b, f"parallel runs differ from sequential: deviation={_deviation(a, b):.3g} bound=0"
    assert _verdicts(seq) == _verdicts(par)
    launch = json.loads((par / "results.json").read_text())["launch"]
    assert launch["this_invocation"]["jobs"] == 2
    for name in a:
        rec = read_launch_record(par, name)["attempts"]
        assert [x["threads"] for x in rec] == [1] and rec[0]["launcher"] == "local-processes"
        assert rec[0]["pid"] != os.getpid()  # it ran in a worker
        assert launch["pairs"][name]["threads"] == [1]
    assert "| 1 | local-processes |" in (par / "report.md").read_text()  # per-run threads in the report
    seq_rec = read_launch_record(seq, "gr-s1")["attempts"]
    assert seq_rec[0]["threads"] == 1 and seq_rec[0]["pid"] == os.getpid()


def _what_the_worker_had(key: str) -> Outcome:
    """A job that reports what its worker had imported before the job ran, and who started the worker."""
    return Outcome(key, DONE, note=json.dumps({"preloaded": sorted(m for m in WORKER_PRELOAD if m in sys.modules),
                                                "parent": os.getppid(), "plugins": os.getenv(ENV_VAR)}))


def test_slot_workers_start_with_torch_and_the_trainer_already_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    """A `--jobs` worker does not re-import torch (and torch._dynamo on its first optimizer), seconds per
    worker before its first run. Workers are forked from the standard library's fork server, which
    imported them once (multiprocessing.set_forkserver_preload): not started by this process (spawn). A
    process keeps its one server, started with the environment of its first comparison: each worker takes
    the driver's plugins variable of now, not the server's."""
    worker_context()  # the server runs before the variable is set, as after an earlier comparison
    monkeypatch.setenv(ENV_VAR, "the-drivers-plugins-now.py")
    launcher = ProcessLauncher(plan_slots(2, cuda=False, threads=1))
    outcomes = launcher.run([Job(f"j{i}", _what_the_worker_had, (f"j{i}",)) for i in range(2)],
                            lambda key, where: None, lambda outcome: None)
    for outcome in outcomes:
        seen = json.loads(outcome.note)
        assert seen["preloaded"] == sorted(WORKER_PRELOAD), seen
        assert seen["parent"] != os.getpid(), "the worker was started by this process, not the fork server"
        assert seen["plugins"] == "the-drivers-plugins-now.py", seen


def _trains_until_a_signal(key: str, ready: str) -> Outcome:
    """A stand-in for a training loop: counts the stop signals it gets (the loop's handler), says it is
    ready, and returns ``interrupted`` once one came (or ``done`` after 20 s with none). Reports its process
    group and how many signals it got."""
    got: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        Path(ready, key).write_text("ready")
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.5)  # a second signal, if one is coming, arrives now
    finally:
        signal.signal(signal.SIGINT, previous)
    note = json.dumps({"pgrp": os.getpgrp(), "signals": len(got)})
    return Outcome(key, INTERRUPTED if got else DONE, note=note, exit_code=130 if got else None)


def test_a_sigint_to_the_driver_alone_stops_each_running_run_with_one_signal(tmp_path: Path) -> None:
    """`kill -INT` of `dormouse ab` (not a terminal's Ctrl-C, which reaches the foreground group) left the
    workers training: the driver stopped waiting but passed nothing on. Now it passes one SIGINT to each
    worker; the workers have their own process group, so a terminal's Ctrl-C is not a second signal
    (a second one stops a training loop without its checkpoint)."""
    launcher = ProcessLauncher(plan_slots(2, cuda=False, threads=1))
    keys = ["a", "b", "c"]  # two run, the third must never start

    def on_start(key: str, where: str) -> None:
        if key == "b":  # both runs are in their loops: signal the driver alone
            deadline = time.monotonic() + 120
            while len(list(tmp_path.iterdir())) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            os.kill(os.getpid(), signal.SIGINT)

    # pytest's own SIGINT handler would end the session; here a SIGINT the launcher does not take is lost
    ignored = signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        outcomes = launcher.run([Job(k, _trains_until_a_signal, (k, str(tmp_path))) for k in keys], on_start,
                                lambda outcome: None)
    finally:
        signal.signal(signal.SIGINT, ignored)
    assert sorted(o.key for o in outcomes) == ["a", "b"] and launcher.stopped_by == 130
    for outcome in outcomes:
        seen = json.loads(outcome.note)
        assert outcome.status == INTERRUPTED and seen["signals"] == 1, (outcome.key, seen)
        assert seen["pgrp"] != os.getpgrp(), "a worker shares the terminal's process group"


# Long enough that a run is mid-run when its driver is killed (a tiny step is ~20 ms on one thread).
ORPHANS = REAL.replace("train.steps=4, train.eval_every=2", "train.steps=200, train.eval_every=50, "
                       "train.ckpt_every=50")
ORPHAN_BOUND_S = 60  # after the driver's SIGKILL, every process it started is gone within this


def _session(sid: int) -> list[int]:
    """The pids of session ``sid`` (the driver started with start_new_session: itself, its fork server,
    resource tracker and workers, whatever their process group), from /proc."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # it exited while we looked
            continue
        fields = text[text.rindex(")") + 2:].split()
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            pids.append(int(stat.parent.name))
    return pids


def _kill_the_driver_mid_run(tmp_path: Path) -> tuple[Path, Path, Path]:
    """`dormouse ab --jobs 2` SIGKILLed once both runs of its first wave evaluated, then every process it started
    gone (asserted within ORPHAN_BOUND_S): ``(registry, comparison directory, the driver's stdout and stderr)``."""
    reg = _registry(tmp_path, ORPHANS)
    root, out = tmp_path / "ab", tmp_path / "driver.out"
    comp = root / "t"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parents[1]), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "dormouse", "ab", str(reg / "t.yaml"), "--jobs", "2", "--threads", "1",
           "--root", str(root)]
    with out.open("w") as sink:
        driver = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and driver.poll() is None:  # both runs of the first wave evaluated
            if sum(1 for m in comp.glob("*/metrics.jsonl") if m.read_text().strip()) >= 2:
                break
            time.sleep(0.1)
        assert driver.poll() is None, out.read_text()[-3000:]
        assert len(_session(driver.pid)) >= 4, "expected the driver, its fork server, tracker and 2 workers"
        driver.kill()
        driver.wait(timeout=30)
        deadline = time.monotonic() + ORPHAN_BOUND_S
        while _session(driver.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = _session(driver.pid)
        assert not left, f"{len(left)} process(es) of the killed driver still run after {ORPHAN_BOUND_S} s: " + \
            "; ".join(Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")[:120] for pid in left)
    finally:
        for pid in _session(driver.pid):  # what a failing run leaves: only this test's own processes
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return reg, comp, out


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs /proc to find the processes")
def test_a_killed_driver_leaves_no_process_nor_semaphore_and_a_rerun_loses_and_repeats_nothing(
        tmp_path: Path) -> None:
    """SIGKILL of `dormouse ab --jobs 2` must not leave its workers, the fork server or the resource tracker
    alive. Each worker watches its driver and stops its
    run the way SIGINT does (a checkpoint at the next step); then every process the driver started exits.
    The workers' queues hold named semaphores, unlinked once the workers opened them: the resource tracker has
    none to clean up and warns of none. Rerunning the command resumes the stopped runs and finishes the
    comparison, every eval once."""
    reg, comp, out = _kill_the_driver_mid_run(tmp_path)
    assert "leaked semaphore" not in out.read_text(), out.read_text()[-2000:]
    root = comp.parent
    logs = {p.parent.name: p.read_text() for p in comp.glob("*/train.log")}
    stopped = [name for name, log in logs.items() if "interrupted" in log]
    # a run of the first wave may finish before the kill lands (200 steps take ~1.5 s); every other one stops
    unfinished = [name for name, log in logs.items() if "\ndone " not in log]
    assert stopped and stopped == unfinished, f"each running run stops with a checkpoint, as on SIGINT: {logs}"
    for name in stopped:
        assert read_launch_record(comp, name)["attempts"][-1]["state"] == "interrupted"

    # the command again (in this process: its workers are processes all the same)
    run_comparison("t", [], root=root, console=_console(), registry=reg, launch=LaunchRequest(jobs=2, threads=1))
    names = {"rezero-s1", "gr-s1", "rezero-s2", "gr-s2"}
    assert {p.parent.name for p in comp.glob("*/metrics.jsonl")} == names
    for name in names:
        steps = [int(json.loads(ln)["step"]) for ln in (comp / name / "metrics.jsonl").read_text().splitlines()]
        assert steps == list(range(50, 201, 50)), (name, steps)  # nothing lost, nothing twice
        log = (comp / name / "train.log").read_text()
        assert log.count("\ndone ") == 1 and ("resume step=" in log) == (name in stopped), name
    assert json.loads((comp / "results.json").read_text())["complete"]


# --- submitit, local executor ---------------------------------------------------------------------------

PREEMPTED = "gr-s1"  # the trainer caught the preemption signal at step 2 and checkpointed (exit 128+USR2)
KILLED = "rezero-s2"  # preempted where the trainer was not listening: submitit's own handler requeues


def preempt_once(cfg: DictConfig) -> Any:
    """The trainer, except that the first attempt of two runs is preempted at step 2, as a SLURM job is
    when it is preempted or reaches its time limit (USR2): PREEMPTED as the training loop reports it
    (a checkpoint at step 2, then Interrupted(128+USR2)), KILLED by the raw signal after its step-2
    checkpoint, outside the loop's handler."""
    from dormouse.errors import Interrupted
    from dormouse.train.loop import train

    first = str(cfg.train.resume) == "never"
    if first and str(cfg.run.name) == PREEMPTED:
        train(cfg, stop_at_step=2)
        raise Interrupted(128 + int(signal.SIGUSR2), "preempted at step 2 (planted)")
    if first and str(cfg.run.name) == KILLED:
        train(cfg, stop_at_step=2)
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(60)  # submitit's handler requeues the job and exits this process
    return train(cfg)


@pytest.mark.slow
def test_submitit_local_jobs_complete_and_preempted_jobs_requeue_and_resume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sequential: Path) -> None:
    """Each run a submitit job (local executor: real processes, no SLURM). Preempted jobs go through
    submitit's checkpointing hook, are requeued and resume their run from the checkpoint: the numbers
    equal an uninterrupted sequential run's, and so does the report."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    reg = _registry(tmp_path)
    seq = sequential
    console = _console()
    launch = LaunchRequest(launcher="slurm", launcher_overrides=[
        "cluster=local", "gpus_per_run=0", "cpus_per_task=1", "poll_s=0.2", "time_min=10", "signal_delay_s=5"])
    out = run_comparison("t", [], root=tmp_path / "sub", console=console, registry=reg, train_fn=preempt_once,
                         launch=launch).plan.comp_dir
    a, b = _numbers(seq), _numbers(out)
    assert a == b, f"submitit runs differ from sequential: deviation={_deviation(a, b):.3g} bound=0"
    assert _verdicts(out) == _verdicts(seq)
    for name, first in ((PREEMPTED, "interrupted"), (KILLED, "stopped")):
        attempts = read_launch_record(out, name)["attempts"]
        assert [a["state"] for a in attempts] == [first, "done"], attempts  # requeued once, then resumed
        assert attempts[1]["note"] == "resumed from its checkpoint"
        assert attempts[0]["job_id"] == attempts[1]["job_id"]  # the same job, requeued
        assert "resume step=2" in (out / name / "train.log").read_text()
        assert all(a["threads"] == 1 and a["launcher"] == "submitit-local" for a in attempts)
    assert [a["state"] for a in read_launch_record(out, "rezero-s1")["attempts"]] == ["done"]
    text = console.export_text()
    assert "submitit-local job" in text and "done gr-s1" in text
    assert "| submitit-local |" in (out / "report.md").read_text()


# --- the runner's locks ---------------------------------------------------------------------------------

_HOLD = """
import sys, time
from pathlib import Path
from dormouse.run.lock import comparison_lock, run_lock
which, comp, run = sys.argv[1:4]
lock = (comparison_lock(Path(comp)) if which == "comparison" else run_lock(Path(comp), run)).acquire()
print("held", flush=True)
time.sleep(120)
"""


def _hold(which: str, comp_dir: Path, run: str = "") -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, which, str(comp_dir), run], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def _fake() -> Any:
    from test_ab import FakeTrain

    return FakeTrain()


def test_a_second_dormouse_ab_on_a_live_comparison_is_refused_with_pid_and_host(tmp_path: Path) -> None:
    from test_ab import SPEC

    reg = _registry(tmp_path, SPEC)
    comp = (tmp_path / "ab" / "t").resolve()
    proc = _hold("comparison", comp)
    try:
        fake, err = _fake(), _console()
        code = exit_code(ab_run, "t", [], root=tmp_path / "ab", registry=reg, console=_console(), err=err,
                         train_fn=fake)
        assert code == 2 and fake.calls == []
        assert f"pid {proc.pid} on host {socket.gethostname()}" in err.export_text()
    finally:
        proc.kill()
        proc.wait(timeout=30)
    # The holder died without releasing: the next run takes the stale lock over and says whose it was.
    console, fake = _console(), _fake()
    assert ab_run("t", [], root=tmp_path / "ab", registry=reg, console=console, train_fn=fake) == 0
    text = console.export_text()
    assert f"took over a stale lock on comparison {comp}" in text
    assert f"pid {proc.pid}" in text and len(fake.calls) == 15


def test_a_run_trained_by_another_process_is_not_touched(tmp_path: Path) -> None:
    """A job left running by a dead driver still holds its run's lock: a new driver leaves that run alone
    (it would delete the running run's directory to restart it) and refuses to --restart under it."""
    from test_ab import SPEC, FakeTrain

    reg = _registry(tmp_path, SPEC)
    comp = (tmp_path / "ab" / "t").resolve()
    run_comparison("t", [], root=tmp_path / "ab", registry=reg, console=_console(),
                   train_fn=FakeTrain(stop_at={"gr-s2": 10}))
    proc = _hold("pair", comp, "gr-s2")
    try:
        fake = _fake()
        code = ab_run("t", [], root=tmp_path / "ab", registry=reg, console=_console(), train_fn=fake)
        assert code == 1 and fake.calls == []  # gr-s2 failed for this invocation, untouched
        assert "resume step" not in (comp / "gr-s2" / "train.log").read_text()
        arm = json.loads((comp / "results.json").read_text())["arms"]["gr"]
        assert arm["verdict"] == "invalid" and f"pid {proc.pid}" in arm["sentence"]
        with pytest.raises(ComparisonError, match="gr-s2 are still being trained"):
            run_comparison("t", [], root=tmp_path / "ab", registry=reg, console=_console(), train_fn=fake,
                           restart=True)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    fake = _fake()
    assert ab_run("t", [], root=tmp_path / "ab", registry=reg, console=_console(), train_fn=fake) == 0
    assert fake.calls == [("gr-s2", "auto")]


# --- --plan, --status, the board, errors once -----------------------------------------------------------

def test_plan_trains_nothing_writes_nothing_and_shows_runs_overrides_state_and_cost(tmp_path: Path) -> None:
    from test_ab import SPEC, FakeTrain

    reg = _registry(tmp_path, SPEC)
    console = _console()
    assert ab_plan("t", ["train.lr=0.002"], root=tmp_path / "ab", registry=reg, console=console,
                   launch=LaunchRequest(jobs=2, threads=1)) == 0
    text = console.export_text()
    assert not (tmp_path / "ab").exists()
    assert "arm attnres_block: model.use_attnres=true model.attnres.block_size=2" in text
    assert "CLI:   train.lr=0.002" in text and "jobs=2" in text and "threads_per_pair=1" in text
    # tokens = steps x batch x seq_len = 20 x 4 x 32 (the tiny preset, train.steps=20)
    assert text.count("2.56k") == 15
    assert "left to run at most (every look, no arm decided early): 15 of 15 runs" in text
    assert "looks at 3 replicates per arm" in text and "SESOI 0.01 bpb" in text
    assert "│ 3         │ 1    │ 3         │ 103       │ 203" in text  # replicate 3: init seed, data seeds
    assert "unknown until a run of each arm has finished" in text

    run_comparison("t", ["train.lr=0.002"], root=tmp_path / "ab", registry=reg, console=_console(),
                   train_fn=FakeTrain(stop_at={"gr-s2": 10}))
    console = _console()
    ab_plan("t", ["train.lr=0.002"], root=tmp_path / "ab", registry=reg, console=console)
    text = console.export_text()
    assert "15 runs" in text and ": 1 of 15 runs" in text and "resume: interrupted (last eval at step 10" in text
    assert "continues" in text and "estimated wall time: ≈" in text
    console = _console()
    ab_plan("t", [], root=tmp_path / "ab", registry=reg, console=console)
    assert "DIFFERS" in console.export_text()


def test_the_time_left_is_estimated_from_runs_timed_on_this_cpu_only(tmp_path: Path) -> None:
    """A comparison resumed on a machine with another CPU does not project its remaining runs at the old CPU's
    speed (the depth study's runs took 3.7 times as long after such a move): runs that recorded another CPU
    leave the plan's estimate and the status's ETA."""
    from test_ab import SPEC, FakeTrain

    from dormouse.ab.comparison.plan import build_plan
    from dormouse.ab.comparison.status import comparison_status

    reg = _registry(tmp_path, SPEC)
    run_comparison("t", ["train.lr=0.002"], root=tmp_path / "ab", registry=reg, console=_console(),
                   train_fn=FakeTrain(stop_at={"gr-s2": 10}))

    def ask() -> tuple[str, float | None]:
        console = _console()
        ab_plan("t", ["train.lr=0.002"], root=tmp_path / "ab", registry=reg, console=console)
        plan = build_plan("t", ["train.lr=0.002"], tmp_path / "ab", reg)
        return console.export_text(), comparison_status(plan)["eta_s"]

    text, eta = ask()
    assert "estimated wall time: ≈" in text and eta is not None
    for prov in (tmp_path / "ab" / "t").glob("*/provenance.json"):
        prov.write_text(json.dumps({**json.loads(prov.read_text()),
                                    "cpu": {"model": "another CPU", "torch_capability": "AVX2", "isa": []}}))
    text, eta = ask()
    assert "estimated wall time: unknown until a run of each arm has finished on this CPU" in text and eta is None


def test_status_during_a_run_shows_done_running_pending_and_failed(tmp_path: Path) -> None:
    from test_ab import SPEC, FakeTrain

    reg = _registry(tmp_path, SPEC)
    seen: dict[str, str] = {}
    fake = FakeTrain(fail=("rezero-s1",))

    def watching(cfg: DictConfig) -> None:
        if str(cfg.run.name) == "gr-s2":  # mid-comparison: ask for the status from "another terminal"
            console = Console(record=True, width=250)
            assert status_command("t", root=tmp_path / "ab", registry=reg, console=console) == 0
            seen["text"] = console.export_text()
        fake(cfg)

    assert status_command("t", root=tmp_path / "ab", registry=reg, console=_console()) == 2  # not started
    run_comparison("t", [], root=tmp_path / "ab", registry=reg, console=_console(), train_fn=watching)
    rows = {ln.split()[0]: ln for ln in seen["text"].splitlines() if ln.strip() and "-s" in ln.split()[0]}
    assert "running" in rows["gr-s2"] and f"pid {os.getpid()}" in rows["gr-s2"]
    assert rows["gr-s1"].split()[1:3] == ["done", "20/20"] and "loss=" in rows["gr-s1"]
    assert float(rows["gr-s1"].split()[4]) > 0  # the bpb column: elapsed, then (no ETA when done) the bpb
    assert "failed" in rows["rezero-s1"] and "planted failure" in rows["rezero-s1"]
    assert "pending" in rows["attnres_full-s2"]
    assert "5 done, 1 running, 8 pending, 1 failed" in seen["text"]
    assert f"driver: pid {os.getpid()}" in seen["text"] and "comparison ETA:" in seen["text"]


def test_the_board_is_plain_lines_off_a_terminal_and_a_live_table_on_one(tmp_path: Path) -> None:
    from test_ab import SPEC, FakeTrain

    reg = _registry(tmp_path, SPEC)
    plain = _console()
    run_comparison("t", [], root=tmp_path / "a", registry=reg, console=plain, train_fn=FakeTrain())
    text = plain.export_text()
    assert text.count("start ") == 15 and text.count("done ") >= 15
    assert text.count("┃ run ") == 1  # the progress table once, at the end: never reprinted per run
    buf = io.StringIO()
    term = Console(file=buf, force_terminal=True, width=200)
    run_comparison("t", [], root=tmp_path / "b", registry=reg, console=term, train_fn=FakeTrain())
    raw = buf.getvalue()
    assert "\x1b[2K" in raw or "\x1b[1A" in raw  # rich Live: cursor moves, the table redrawn in place
    assert "start rezero-s1" not in raw  # no per-run lines on a terminal: the table says it


def test_an_invalid_override_is_reported_once_for_the_comparison(tmp_path: Path) -> None:
    from test_ab import SPEC

    reg = _registry(tmp_path, SPEC)
    with pytest.raises(ComparisonError) as info:
        run_comparison("t", ["train.lr=-1"], root=tmp_path / "ab", registry=reg, console=_console())
    lines = [ln for ln in info.value.lines if "train.lr" in ln]
    assert len(lines) == 1 and "every arm" in lines[0], info.value.lines
    (reg / "t.yaml").write_text(SPEC.replace("model.attnres.block_size=2", "model.attnres.block_size=0"))
    with pytest.raises(ComparisonError) as info:
        run_comparison("t", ["train.lr=-1"], root=tmp_path / "ab", registry=reg, console=_console())
    assert sum("train.lr" in ln for ln in info.value.lines) == 1
    assert [ln for ln in info.value.lines if "block_size" in ln][0].count("arm 'attnres_block'") == 1
