"""The ``dormouse`` command line (Typer): thin wrappers over the modules that do the work.

Hydra's ``@hydra.main`` does not work under Typer, so every command takes Hydra overrides as positional
arguments (``key=value``) and composes the config through Hydra's compose API
(:func:`dormouse.config.load_config`). Bad input exits with code 2 and one line per problem, before any
work and before any run directory exists.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from omegaconf import OmegaConf
from rich.console import Console

from dormouse.config import ConfigError, load_config

app = typer.Typer(
    name="dormouse",
    help="Train a looped byte-level LM and A/B-compare residual mechanisms (ReZero, GR, AttnRes).",
    rich_markup_mode="rich",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True, highlight=False)

OVERRIDES = typer.Argument(None, help="Hydra overrides, key=value (e.g. model.use_attnres=true).",
                           show_default=False)


def _config_or_exit(overrides: list[str] | None):
    try:
        return load_config(list(overrides or []))
    except ConfigError as exc:
        for line in exc.lines:
            err.print(f"[bold red]error:[/] {line}", markup=True, soft_wrap=True)
        raise typer.Exit(2) from None


@app.command(epilog="""[bold]Examples[/]\n
  dormouse train\n
  dormouse train model.use_attnres=true model.max_iter=4 train.steps=2000\n
  dormouse train model.use_gr=true data.path=my_corpus/\n
  dormouse train preset=9m model.use_attnres=true model.attnres.block_size=2\n
  dormouse train run.name=myrun train.resume=auto      # continue an interrupted run\n
  torchrun --nproc_per_node=2 -m dormouse train train.device=cpu""")
def train(overrides: list[str] = OVERRIDES) -> None:
    """Train one model (no arguments: the CPU default on the embedded Shakespeare corpus)."""
    cfg = _config_or_exit(overrides)
    from dormouse.checkpoint import CheckpointError
    from dormouse.data import DataError
    from dormouse.train import Interrupted, TrainError
    from dormouse.train import train as run_training

    try:
        result = run_training(cfg)
    except (DataError, TrainError, CheckpointError) as exc:
        err.print(f"[bold red]error:[/] {exc}", markup=True, soft_wrap=True)
        raise typer.Exit(2 if isinstance(exc, DataError) else 1) from None
    except Interrupted as exc:
        raise typer.Exit(exc.exit_code) from None
    final = result.metrics[-1] if result.metrics else {}
    if final:
        print(f"done: {result.run_dir}  val bpb={final['bpb']:.4f}  wall={result.wall_s:.1f}s", flush=True)


@app.command(epilog="""[bold]Examples[/]\n
  dormouse validate\n
  dormouse validate preset=9m model.use_attnres=true\n
  dormouse validate model.use_attnres=true model.use_gr=true   # refused: exit 2, names both fields""")
def validate(overrides: list[str] = OVERRIDES) -> None:
    """Compose and validate the config, print it resolved, and train nothing."""
    cfg = _config_or_exit(overrides)
    print(OmegaConf.to_yaml(cfg), end="")


@app.command(epilog="""[bold]Examples[/]\n
  dormouse ab smoke                          # the whole flow on CPU in a few minutes\n
  dormouse ab residual                       # the registered GPU comparison (3 seeds)\n
  dormouse ab smoke train.steps=40 --restart""")
def ab(
    name: str = typer.Argument(..., help="A registered comparison: conf/ab/NAME.yaml."),
    overrides: list[str] = OVERRIDES,
    restart: bool = typer.Option(False, "--restart", help="Discard earlier results and start over."),
    root: Path = typer.Option(Path("runs/ab"), help="Where comparisons are written."),
) -> None:
    """Run a registered A/B comparison to a verdict (resumable: rerun to continue)."""
    from dormouse.ab.runner import ab_command

    # 0 all pairs finished; 1 a pair failed (marked in the report); 2 refused before any run; 130/143 interrupted
    raise typer.Exit(ab_command(name, list(overrides or []), restart=restart, root=root))


@app.command(epilog="""[bold]Examples[/]\n
  dormouse logs runs/attnres-20261129-101500-000000\n
  dormouse logs runs/ab/smoke --check\n
  dormouse logs runs/a/train.log runs/b/train.log""")
def logs(
    paths: list[Path] = typer.Argument(..., help="Run directories, A/B directories or train.log files."),
    check: bool = typer.Option(False, "--check", help="Exit 1 when there is any finding."),
) -> None:
    """Show eval lines as a table and report findings (dead or leaking arms, NaNs, malformed lines)."""
    from dormouse.logs import logs_command

    raise typer.Exit(logs_command(paths, check, Console()))


def main() -> None:
    app(prog_name="dormouse")


if __name__ == "__main__":
    sys.exit(main())
