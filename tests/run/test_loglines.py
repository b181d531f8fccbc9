"""Every train.log / metrics.jsonl line kind: its formatter and parser agree (a round trip per kind), and
the replay rule a resumed run's logs rely on.

The literal lines below were written by the trainer at commit ea582a6, before the formats moved into
dormouse/run/loglines.py: they pin that the move changed no byte of what a run writes.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dormouse.arms.registry import ARMS
from dormouse.run.loglines import (
    DONE,
    EVAL,
    INTERRUPTED,
    REPAIR,
    RESUME,
    LogLineError,
    format_done_line,
    format_eval_line,
    format_interrupted_line,
    format_metrics_row,
    format_repair_line,
    format_resume_line,
    human,
    last_eval_phrase,
    line_kind,
    parse_count,
    parse_done_line,
    parse_eval_line,
    parse_interrupted_line,
    parse_metrics_row,
    parse_repair_line,
    parse_resume_line,
    replay,
    torn_tail,
)

SPEC_LINE = ("eval step=400 tokens=1.64M loss=1.412 bpb=2.037 bpb@1=2.410 bpb@2=2.155 bpb@3=2.061 "
             "bpb@4=2.037 lr=2.4e-04 tok/s=8.1k depth=4.0 arm=attnres rezero=0/0 gr=0/0 "
             "attnres=3600/3600 kernel=torch skipped=0")
# Written by `dormouse train preset=tiny train.steps=30 train.ckpt_every=10` at ea582a6.
TRAINER_EVAL = ("eval step=10 tokens=1.28k loss=5.2579 bpb=6.7646 bpb@1=6.8510 bpb@2=6.7646 lr=2.60e-03 "
                "tok/s=318 depth=2.00 arm=rezero rezero=40/40 gr=0/0 attnres=0/0 kernel=none skipped=0")
TRAINER_DONE = "done step=30 wall_s=10.5"


def row(step: int, arm: str = "attnres", bpb: float = 1.875, max_iter: int = 3) -> dict:
    r = {"step": step, "tokens": step * 4096, "loss": bpb * 0.69, "bpb": bpb, "lr": 1e-3, "tok/s": 8100.0,
         "depth": float(max_iter), "arm": arm, "kernel": "torch", "skipped": 2}
    r.update({f"bpb@{k}": bpb + 0.1 * (max_iter - k) for k in range(1, max_iter + 1)})
    for name in ARMS:
        r[f"{name}_ran"] = r[f"{name}_asked"] = 40 if name == arm else 0
    return r


def test_eval_line_round_trips_the_trainers_line_to_the_byte() -> None:
    """The training loss's label says its unit (``train_loss_nats``); a line with the bare ``loss=`` parses to
    the same row."""
    values = parse_eval_line(TRAINER_EVAL)
    # the unselected arms' 0/0 are read, and written back only to metrics.jsonl
    line = TRAINER_EVAL.replace(" loss=", " train_loss_nats=").replace(" gr=0/0 attnres=0/0", "")
    assert format_eval_line(values, 2) == line
    assert parse_eval_line(line) == {k: v for k, v in values.items() if not k.startswith(("gr_", "attnres_"))}


def test_the_eval_line_labels_the_training_loss_in_nats_beside_the_bpb_in_bits() -> None:
    line = format_eval_line(row(300))
    assert " train_loss_nats=1.2937 bpb=1.8750 " in line and " loss=" not in line
    assert parse_eval_line(line)["loss"] == pytest.approx(1.29375, abs=5e-5)  # metrics.jsonl's key


def test_eval_row_round_trips_through_the_line() -> None:
    r = row(300)
    v = parse_eval_line(format_eval_line(r, 3))
    for key in ("step", "arm", "kernel", "skipped", "attnres_ran", "attnres_asked"):
        assert v[key] == r[key], key
    assert "gr_ran" not in v and "rezero_asked" not in v  # 0/0: metrics.jsonl's only
    # The line keeps 4 decimals of the bpb columns and 3 significant figures of the counts.
    for key in ("bpb", "bpb@1", "bpb@3", "loss"):
        assert v[key] == pytest.approx(r[key], abs=5e-5)
    assert v["tokens"] == pytest.approx(r["tokens"], rel=5e-3) and v["depth"] == r["depth"]


def test_parse_the_spec_example_line() -> None:
    v = parse_eval_line(SPEC_LINE)
    assert v["step"] == 400 and v["tokens"] == 1_640_000 and v["tok/s"] == pytest.approx(8100.0)
    assert v["bpb"] == pytest.approx(2.037) and v["bpb@1"] == pytest.approx(2.410)
    assert v["lr"] == pytest.approx(2.4e-4) and v["depth"] == 4.0
    assert v["arm"] == "attnres" and v["kernel"] == "torch" and v["skipped"] == 0
    assert (v["attnres_ran"], v["attnres_asked"], v["gr_ran"], v["rezero_asked"]) == (3600, 3600, 0, 0)


def test_parse_nan_is_a_float_not_an_error() -> None:
    v = parse_eval_line(SPEC_LINE.replace("bpb=2.037", "bpb=nan"))
    assert math.isnan(v["bpb"])


@pytest.mark.parametrize("bad", [
    "eval step=4OO tokens=1k loss=1 bpb=2 arm=gr rezero=0/0 gr=1/1 attnres=0/0",  # not an int
    "eval step=400 tokens=1k loss=1 bpb=2 arm=attnres rezero=0/0 gr=1/1",  # the selected arm's counter missing
    "eval step=400 tokens=1k loss=1 bpb=2 arm=gr rezero=0/0 gr=1/1 attnres=0/0 garbage",  # not key=value
    "eval step=400 step=401 loss=1 bpb=2 arm=gr rezero=0/0 gr=1/1 attnres=0/0",  # duplicate
    "eval step=400 tokens=1.2",  # a write cut short
])
def test_parse_malformed_raises_with_the_field(bad: str) -> None:
    with pytest.raises(LogLineError):
        parse_eval_line(bad)


def test_a_line_from_before_an_arm_was_registered_still_parses() -> None:
    """A registry arm added later (its counter token absent from old lines) must not make published logs
    unreadable; the selected arm's counter stays required (above)."""
    v = parse_eval_line("eval step=400 tokens=1k loss=1 bpb=2 arm=gr rezero=0/0 gr=1/1")
    assert (v["gr_ran"], v["rezero_asked"]) == (1, 0) and "attnres_ran" not in v


def test_resume_line_round_trips_a_path_with_spaces() -> None:
    source = Path("runs/my run/checkpoints/step_00000010.pt")
    line = format_resume_line(10, source)
    assert line == "resume step=10 from=runs/my run/checkpoints/step_00000010.pt"
    assert parse_resume_line(line) == {"step": 10, "from": str(source)}
    with pytest.raises(LogLineError):
        parse_resume_line("resume step=10")


def test_interrupted_line_round_trips() -> None:
    assert format_interrupted_line(25) == "interrupted step=25"
    assert parse_interrupted_line(format_interrupted_line(25)) == {"step": 25}
    with pytest.raises(LogLineError):
        parse_interrupted_line("interrupted step=x")


def test_done_line_round_trips_the_trainers_line() -> None:
    assert format_done_line(30, 10.5) == TRAINER_DONE
    assert parse_done_line(TRAINER_DONE) == {"step": 30, "wall_s": 10.5}
    assert parse_done_line(format_done_line(2400, 339.24)) == {"step": 2400, "wall_s": 339.2}
    with pytest.raises(LogLineError):
        parse_done_line("done wall_s=3")


def test_metrics_row_round_trips_nan() -> None:
    r = row(12, bpb=float("nan"))  # every bpb column and the loss are NaN, the rest are numbers and names
    back = parse_metrics_row(format_metrics_row(r))
    assert list(back) == list(r)
    nan_keys = {k for k, v in r.items() if isinstance(v, float) and math.isnan(v)}
    assert nan_keys and all(math.isnan(back[k]) for k in nan_keys)
    assert {k: v for k, v in back.items() if k not in nan_keys} == {k: v for k, v in r.items() if k not in nan_keys}
    with pytest.raises(LogLineError):
        parse_metrics_row('{"step": 1')  # a write cut short by a kill


def test_every_line_kind_is_recognised_by_its_first_word() -> None:
    assert [line_kind(ln) for ln in (TRAINER_EVAL, format_resume_line(4, "c.pt"), format_interrupted_line(5),
                                     TRAINER_DONE, format_repair_line("metrics.jsonl", 3, 1), "# commit: abc",
                                     "warn x", "evaluation")] == \
        [EVAL, RESUME, INTERRUPTED, DONE, REPAIR, None, None, None]


def test_repair_line_round_trips() -> None:
    line = format_repair_line("metrics.jsonl", 24, 2)
    assert line == "repair file=metrics.jsonl torn_bytes=24 dropped_rows=2"
    assert parse_repair_line(line) == {"file": "metrics.jsonl", "torn_bytes": 24, "dropped_rows": 2}
    with pytest.raises(LogLineError):
        parse_repair_line("repair torn_bytes=24")


def test_torn_tail_is_what_follows_the_last_newline(tmp_path: Path) -> None:
    path = tmp_path / "f"
    assert torn_tail(path) == 0  # no file
    path.write_bytes(b"")
    assert torn_tail(path) == 0
    path.write_bytes(b"a\nbc")
    assert torn_tail(path) == 2
    path.write_bytes(b"no newline at all")
    assert torn_tail(path) == 17
    path.write_bytes(b"x" * 70000 + b"\n" + b"y" * 70000)  # past one read of the backwards scan
    assert torn_tail(path) == 70000
    path.write_bytes(b"a\nb\n")
    assert torn_tail(path) == 0


def test_a_replayed_step_replaces_the_rows_from_that_step_on() -> None:
    rows = [{"step": s, "v": "first"} for s in (10, 20, 30)]
    step = lambda r: r["step"]  # noqa: E731
    assert replay(rows, {"step": 20, "v": "replay"}, step) == [rows[0], {"step": 20, "v": "replay"}]
    assert replay(rows, {"step": 40, "v": "next"}, step) == [*rows, {"step": 40, "v": "next"}]
    assert replay(rows, {"step": 5, "v": "from scratch"}, step) == [{"step": 5, "v": "from scratch"}]


def test_learned_summary_round_trips_and_is_optional() -> None:
    r = {**row(300), "learned_name": "emb_w", "learned": 0.21125}
    line = format_eval_line(r, 3)
    assert " attnres=40/40 learned=emb_w:0.2112 kernel=torch " in line  # after the (selected arm's) counter
    v = parse_eval_line(line)
    assert v["learned_name"] == "emb_w" and v["learned"] == 0.2112
    assert "learned" not in format_eval_line(row(300), 3)  # a row without probe fields
    with pytest.raises(LogLineError, match="learned"):
        parse_eval_line(line.replace("learned=emb_w:0.2112", "learned=0.2112"))


def test_a_run_stopped_before_its_first_eval_says_so_not_step_none() -> None:
    assert last_eval_phrase([]) == "stopped before its first eval"
    assert last_eval_phrase([row(10), {**row(20), "bpb": 2.25}]) == "last eval at step 20 (bpb 2.2500)"


@pytest.mark.parametrize(("n", "text"), [(512, "512"), (0.5, "0.5"), (12.0, "12"), (1638400, "1.64M"),
                                         (8123.4, "8.12k"), (3e12, "3T"), (2.5e15, "2.5P"), (-2500, "-2.5k")])
def test_human_is_the_one_count_format_and_parse_count_reads_it_back(n: float, text: str) -> None:
    """The eval line's counts and the A/B status's tokens and FLOPs (the A/B status's `_si`, which it replaces):
    3 significant figures, k..P. The inverse is parse_count, to those 3 figures."""
    assert human(n) == text
    assert parse_count(text) == pytest.approx(n, rel=5e-3)


def test_the_eval_line_shows_the_selected_arms_counter_and_a_leaking_one_but_no_unselected_zeros():
    quiet = row(400, arm="gr")
    line = format_eval_line(quiet)
    assert " gr=40/40 " in line and not any(f" {a}=" in line for a in ARMS if a != "gr")
    leaking = {**quiet, "rezero_ran": 3}
    line = format_eval_line(leaking)
    assert " gr=40/40 " in line and " rezero=3/0 " in line
    assert parse_eval_line(line)["rezero_ran"] == 3  # logs --check reads the leak back from the line
