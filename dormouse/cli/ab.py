"""``dormouse ab``: a group of verbs over registered comparisons (Typer wrappers over dormouse.ab.comparison.command and
dormouse.ab).

``run``, ``plan``, ``status``, ``design`` and ``list`` ask about a comparison; ``publish``, ``carry``, ``rerun``
and ``size`` carry one through its life after the runs. A first argument that is no verb is a comparison to run
(:class:`VerbOrComparison`): ``dormouse ab NAME [OVERRIDES] [--jobs N]`` is ``dormouse ab run NAME ...``, so a
comparison named like a verb is reached by ``dormouse ab run NAME``. The mode flags a run never takes
(``--plan``, ``--status``, ``--design``, ``--list``) are refused with the verb that asks the question: a flag
that turned a run into a read would keep a second spelling of every verb, and a refusal costs one retyped word.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import click
import typer
from typer.core import TyperGroup

from dormouse.cli.completion import complete_comparison, complete_override
from dormouse.cli.exits import load_plugins
from dormouse.run.files import AB_ROOT, RERUN_ROOT, published_dir

RUN = "run"


class CarryAction(str, Enum):
    """``dormouse ab carry``'s two directions."""

    save = "save"
    restore = "restore"


# A flag that asked a question of `dormouse ab NAME`, and the verb that asks it.
QUESTION_FLAGS = {"--plan": "plan", "--status": "status", "--design": "design", "--list": "list"}
VALUE_OPTIONS = ("--root", "--jobs", "-j", "--threads", "--launcher")  # a run's options that take a value


def refuse_question_flags(args: list[str]) -> None:
    """Refuse a question asked as a flag (``dormouse ab NAME --plan``), naming the verb (ComparisonError: exit 2)."""
    from dormouse.ab.comparison.registry import ComparisonError

    words = args[: args.index("--")] if "--" in args else args
    asked = [flag for flag in QUESTION_FLAGS if flag in words]
    if asked:
        # the comparison: the first word that is no option, no option's value and no verb
        verbs = (RUN, *QUESTION_FLAGS.values())
        name = next((w for i, w in enumerate(words) if not w.startswith("-") and w not in verbs
                     and not (i and words[i - 1] in VALUE_OPTIONS)), "NAME")
        verb = QUESTION_FLAGS[asked[0]]
        raise ComparisonError([f"{asked[0]} is not an option of dormouse ab: ask `dormouse ab {verb}"
                               + ("`" if verb == "list" else f" {name}`")])


class VerbOrComparison(TyperGroup):
    """``dormouse ab``'s verbs; a first argument that is none of them names a comparison (or a PATH.yaml) to run."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        refuse_question_flags(args)
        if args and args[0].startswith("-") and args[0] not in self.get_help_option_names(ctx):
            args = [RUN, *args]  # `dormouse ab --jobs 2 NAME`: a run's options before its name
        return super().parse_args(ctx, args)

    def resolve_command(self, ctx: click.Context,
                        args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            return RUN, self.commands[RUN], args
        return super().resolve_command(ctx, args)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list:
        """The verbs, then the registered comparisons (``dormouse ab smo<TAB>``)."""
        from click.shell_completion import CompletionItem

        return [*super().shell_complete(ctx, incomplete),
                *(CompletionItem(name) for name in complete_comparison(incomplete))]


ab_app = typer.Typer(
    name="ab", cls=VerbOrComparison, no_args_is_help=True, rich_markup_mode="rich",
    subcommand_metavar="VERB [ARGS]... | NAME [OVERRIDES]...",
    help="Run a registered A/B comparison to a verdict, ask where it stands, publish it.\n\n"
         "`dormouse ab NAME [OVERRIDES]` runs NAME (resumable: rerun to continue), as `dormouse ab run NAME` does. "
         "A sweep explores; a registered comparison decides: `dormouse train -m` runs settings, `ab` gives a verdict.",
    epilog="""[bold]Examples[/]\n
  dormouse ab list                           # the registered comparisons and what each compares\n
  dormouse ab smoke                          # the whole flow on CPU: ~30 s on 2 idle cores\n
  dormouse ab residual                       # the registered GPU comparison (looks at 3, 6, 9), one run at a time\n
  dormouse ab residual --jobs 8              # 8 runs at once: one GPU each (or a share of the CPU cores)\n
  dormouse ab residual --launcher slurm launcher.partition=gpu launcher.time_min=120\n
  dormouse ab plan residual --jobs 8         # what would run, what is done, the cost; trains nothing\n
  dormouse ab status residual                # looks taken and what they decided, runs, ETA; safe during a run\n
  dormouse ab design smoke                   # the design card: type-I error, power, expected replicates\n
  dormouse ab my_comparison.yaml             # your own registration file (same fields as conf/ab/*.yaml)\n
  dormouse ab run smoke train.steps=40 --restart\n
  dormouse ab publish residual_cpu2 --command "dormouse ab residual_cpu2 --jobs 2"\n
  dormouse ab carry save residual_cpu2       # what resuming needs, into docs/results/NAME/carry\n
  dormouse ab rerun residual_cpu2 gr 201     # one published run, re-trained and checked bit for bit""")

NAME = typer.Argument(..., help="A registered comparison (conf/ab/NAME.yaml) or the path of a registration file "
                      "PATH.yaml.", show_default=False, autocompletion=complete_comparison)
OVERRIDES = typer.Argument(None, show_default=False, autocompletion=complete_override,
                           help="Hydra overrides for every run (key=value), and launcher.KEY=VALUE for --launcher "
                                "slurm.")
ROOT = typer.Option(AB_ROOT, "--root", help="Where comparisons are written.")
JOBS = typer.Option(1, "--jobs", "-j", help="Training runs at once on this machine, each in its own process "
                    "(one GPU each on CUDA, an equal share of the cores on CPU).")
THREADS = typer.Option(None, "--threads", show_default=False,
                       help="CPU threads per run (default: the cores divided by --jobs).")
LAUNCHER = typer.Option("local", "--launcher",
                        help="local (this machine; see --jobs) or slurm (conf/launcher/slurm.yaml).")


def _launch(overrides: list[str] | None, jobs: int, threads: int | None, launcher: str):
    """The Hydra overrides and how the runs launch (``launcher.KEY=VALUE`` go to the launcher)."""
    from dormouse.ab.launchers.request import LaunchRequest, split_overrides

    hydra_overrides, launcher_overrides = split_overrides(list(overrides or []))
    return hydra_overrides, LaunchRequest(jobs=jobs, threads=threads, launcher=launcher,
                                          launcher_overrides=launcher_overrides)


@ab_app.command(RUN)
def run_(ctx: typer.Context, name: str = NAME, overrides: list[str] = OVERRIDES,
         restart: bool = typer.Option(False, "--restart", help="Discard earlier results and start over."),
         root: Path = ROOT, jobs: int = JOBS, threads: int = THREADS, launcher: str = LAUNCHER) -> None:
    """Run (or continue) a comparison to its verdicts. Exit 0: every run it needed finished; 1: a run failed."""
    load_plugins(ctx)
    from dormouse.ab.comparison.command import ab_run

    hydra_overrides, request = _launch(overrides, jobs, threads, launcher)
    raise typer.Exit(ab_run(name, hydra_overrides, restart=restart, root=root, launch=request))


@ab_app.command()
def plan(ctx: typer.Context, name: str = NAME, overrides: list[str] = OVERRIDES, root: Path = ROOT,
         jobs: int = JOBS, threads: int = THREADS, launcher: str = LAUNCHER) -> None:
    """The runs, their overrides, what is done, the launch settings and the estimated cost; trains nothing."""
    load_plugins(ctx)
    from dormouse.ab.comparison.command import ab_plan

    hydra_overrides, request = _launch(overrides, jobs, threads, launcher)
    raise typer.Exit(ab_plan(name, hydra_overrides, root=root, launch=request))


@ab_app.command()
def status(ctx: typer.Context, name: str = NAME, root: Path = ROOT) -> None:
    """Where a comparison stands: looks taken and what they decided, runs, ETA (read-only; exit 2 if never started)."""
    load_plugins(ctx)
    from dormouse.ab.comparison.command import ab_status

    raise typer.Exit(ab_status(name, root=root))


@ab_app.command()
def design(ctx: typer.Context, name: str = NAME, overrides: list[str] = OVERRIDES, root: Path = ROOT) -> None:
    """Simulate the registered design and print its card (type-I error, power, expected replicates).

    The card is saved with the comparison (its report shows it)."""
    load_plugins(ctx)
    from dormouse.ab.comparison.command import ab_design

    raise typer.Exit(ab_design(name, list(overrides or []), root=root))


@ab_app.command("list")
def list_(ctx: typer.Context) -> None:
    """The registered comparisons and studies: arms, looks or seeds, and what each compares."""
    load_plugins(ctx)
    from dormouse.ab.comparison.registry import ABSpecError, is_study, list_comparisons, load_spec
    from dormouse.ab.study.registry import load_study

    for cname in list_comparisons():
        try:
            if is_study(cname):  # a registered study: its points and the comparison each holds
                study = load_study(cname)
                spec = study.template
                print(f"{cname}\tstudy of {study.axis} at {', '.join(map(str, study.values))}: one comparison each "
                      f"(looks at {', '.join(map(str, spec.looks))} replicates, SESOI {spec.sesoi:g} bpb); arms "
                      f"{', '.join(spec.arms)}; baseline {spec.baseline}\n\t{' '.join(spec.description.split())}")
                continue
            spec = load_spec(cname).spec
        except ABSpecError as exc:  # a broken registration is listed, not hidden
            print(f"{cname}\tINVALID: {exc.lines[0]}")
            continue
        size = (f"{len(spec.seeds)} seeds (protocol 1, read only)" if spec.protocol == 1
                else f"looks at {', '.join(map(str, spec.looks))} replicates, SESOI {spec.sesoi:g} bpb")
        print(f"{cname}\t{size}; arms {', '.join(spec.arms)}; baseline {spec.baseline}\n"
              f"\t{' '.join(spec.description.split())}")


@ab_app.command()
def publish(name: str = NAME,
            command: str = typer.Option(..., "--command", help="The exact command that produced the comparison."),
            root: Path = ROOT,
            out: Path = typer.Option(None, "--out", show_default=False, help="Default docs/results/NAME.")) -> None:
    """Copy a finished comparison (or study) into docs/results/NAME with its provenance: commit, machine, time."""
    import json

    from dormouse.ab.lifecycle.publish import publish_named

    print(json.dumps(publish_named(name, command, root=root, out=out or published_dir(name)), indent=2))


@ab_app.command()
def carry(action: CarryAction = typer.Argument(..., help="save: runs/ab/NAME -> the carry folder; restore: back."),
          name: str = NAME, root: Path = ROOT,
          into: Path = typer.Option(None, "--carry", show_default=False,
                                    help="The carry folder (default docs/results/NAME/carry).")) -> None:
    """Keep a comparison resumable across machines: save what resuming needs into the repository, or restore it.

    Saved: the stamps, the launch records and each finished run's small files, no checkpoint; after a restore
    `dormouse ab NAME` goes on from there."""
    from dormouse.ab.lifecycle.carry import restore, save

    folder = into or published_dir(name) / "carry"
    if action is CarryAction.save:
        save(name, root, folder)
    else:
        restore(name, root, folder)


@ab_app.command()
def rerun(name: str = typer.Argument(..., autocompletion=complete_comparison,
                                     help="A registered comparison, or STUDY/POINT for a study's point."),
          arm: str = typer.Argument(..., help="The run's arm."),
          seed: int = typer.Argument(..., help="The run's init seed (its directory's -sSEED)."),
          results: Path = typer.Option(None, "--results", show_default=False,
                                       help="The published results.json (default docs/results/NAME/results.json)."),
          root: Path = typer.Option(RERUN_ROOT, "--root", help="Where the re-run trains."),
          threads: int = typer.Option(None, "--threads", show_default=False,
                                      help="torch threads (default: the published run's, from its launch record)."),
          print_only: bool = typer.Option(False, "--print", help="Print the equivalent `dormouse train` and stop.")
          ) -> None:
    """Re-run one run of a published comparison and check its final bpb is the published one, bit for bit.

    Exit 0 reproduced, 1 not, 2 when the published results are not the registration's."""
    from dormouse.ab.lifecycle.rerun import rerun as rerun_published

    raise typer.Exit(rerun_published(name, arm, seed, results=results, root=root, threads=threads,
                                     print_only=print_only))


@ab_app.command()
def size(results: Path = typer.Argument(..., help="A published results.json."),
         looks: str = typer.Option(..., "--looks", help="Cumulative replicates per look, e.g. 4,8,12."),
         sesoi: float = typer.Option(0.03, "--sesoi", help="The smallest effect of interest (bpb)."),
         expected: float = typer.Option(-0.05, "--expected", help="The effect to state the power at (bpb)."),
         alpha: float = typer.Option(0.05, "--alpha"),
         extra_sd: list[str] = typer.Option(None, "--extra-sd", show_default=False,
                                            help="An arm not in the results: its sd, or max (repeatable)."),
         n_sim: int = typer.Option(None, "--n-sim", show_default=False, help="Simulations (default: the card's).")
         ) -> None:
    """Size the next registration from a published comparison: the design card at its compared arms' paired sds."""
    from rich.console import Console

    from dormouse.ab.lifecycle.size import size_from
    from dormouse.ab.rule.sequential import CARD_N_SIM

    size_from(results, [int(n) for n in looks.split(",")], sesoi=sesoi, expected_effect=expected, alpha=alpha,
              extra_sd=list(extra_sd or []), n_sim=n_sim or CARD_N_SIM, console=Console())
