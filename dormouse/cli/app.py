"""The ``dormouse`` command line (Typer): thin wrappers over the modules that do the work.

Hydra's ``@hydra.main`` does not work under Typer, so every command takes Hydra overrides as positional
arguments (``key=value``) and composes the config through Hydra's compose API
(:func:`dormouse.config.schema.load_config`). Bad input exits with code 2 and one line per problem, before any
work and before any run directory exists. No command catches an error by hand: each raises the dormouse error
that says what went wrong, and the app's one handler (dormouse/cli/exits.py) ends it with that error's exit
code and ``error:`` lines.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer
from omegaconf import OmegaConf
from rich.console import Console
from rich.text import Text

from dormouse.cli.ab import ab_app
from dormouse.cli.completion import complete_override
from dormouse.cli.exits import ExitOnError, err, load_plugins
from dormouse.cli.sample_options import SampleOptions
from dormouse.run.files import RUNS_ROOT

app = typer.Typer(
    name="dormouse",
    help="Train a looped byte-level LM and A/B-compare residual mechanisms (ReZero, GR, AttnRes).",
    rich_markup_mode="rich",
    no_args_is_help=True,
    add_completion=True,  # Typer's own: `dormouse --install-completion` / `--show-completion`
    pretty_exceptions_enable=False,
    cls=ExitOnError,  # every command's DormouseError: its exit code and error lines, no traceback
)

OVERRIDES = typer.Argument(None, help="Hydra overrides, key=value (e.g. model.use_attnres=true).",
                           show_default=False, autocompletion=complete_override)


def _version(value: bool) -> None:
    if value:
        from dormouse import __version__

        print(f"dormouse {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
    plugin: list[str] = typer.Option(None, "--plugin", show_default=False, metavar="FILE_OR_MODULE",
                                     help="Load arms from a .py file or a module (repeatable; anywhere on the "
                                          "line, e.g. `dormouse train --plugin my_arms.py model.use_sgate=true`). "
                                          "Also DORMOUSE_PLUGINS and the `dormouse.arms` entry points."),
) -> None:
    """Train a looped byte-level LM and A/B-compare residual mechanisms (ReZero, GR, AttnRes)."""
    # The plugins load when a command starts (load_plugins), not here: Click calls this before it reads a
    # command's --help, and loading the arms imports torch (seconds) for a help text that needs none of it.


CFG = typer.Option(None, "--cfg", show_default=False,
                   help="job: print the composed config and exit (Hydra's flag); checks and writes nothing.")


def _print_job_config(cfg_flag: str, overrides: list[str] | None) -> None:
    """``--cfg job``: the composed config (schema, preset, overrides) as YAML, like Hydra's own flag; the
    values are not checked (that is `validate`). Hydra's ``hydra`` and ``all`` have no meaning here."""
    from dormouse.config.schema import ConfigError, compose_config

    if cfg_flag != "job":
        raise ConfigError([f"--cfg {cfg_flag}: only --cfg job is supported (dormouse has no Hydra runtime config "
                           "to print)"])
    print(OmegaConf.to_yaml(compose_config(list(overrides or []))), end="")


def _run_config(overrides: list[str] | None):
    """The run's config (the resume defaults applied); a ConfigError naming every bad field otherwise."""
    from dormouse.train.run_config import load_run_config

    return load_run_config(list(overrides or []))


@app.command(epilog="""[bold]Examples[/]\n
  dormouse train\n
  dormouse train model.use_attnres=true model.max_iter=4 train.steps=2000\n
  dormouse train model.use_gr=true data.path=my_corpus/\n
  dormouse train preset=9m model.use_attnres=true model.attnres.block_size=2\n
  dormouse train preset=./my.yaml                      # your own preset file (same form as conf/preset/)\n
  dormouse train preset=tiny --cfg job                 # print the composed config and exit\n
  dormouse train run.name=myrun train.resume=auto      # continue an interrupted run\n
  dormouse train -m train.lr=1e-3,3e-3 run.name=lrs    # a sweep: runs/lrs/0, runs/lrs/1\n
  torchrun --nproc_per_node=2 -m dormouse train train.device=cpu""")
def train(ctx: typer.Context, overrides: list[str] = OVERRIDES, cfg_flag: str = CFG,
          multirun: bool = typer.Option(False, "--multirun", "-m",
                                        help="A sweep (Hydra's -m): one run per setting of a,b values, one after "
                                             "another, in run.dir/<run.name>/<n>. A sweep explores; a registered "
                                             "comparison (dormouse ab) decides.")) -> None:
    """Train one model (no arguments: the CPU default on the embedded Shakespeare corpus).

    A sweep explores; a registered comparison decides: `-m` runs settings, `dormouse ab` gives a verdict."""
    load_plugins(ctx)
    if cfg_flag is not None:
        _print_job_config(cfg_flag, overrides)
        return
    if multirun:
        from dormouse.cli.sweep import run_sweep

        raise typer.Exit(run_sweep(list(overrides or [])))
    cfg = _run_config(overrides)
    from dormouse.train.loop import train as run_training

    # Refused before anything was created (bad data, a config that cannot fit, a run directory that refuses
    # this start) exits 2, as `validate` says; a run that failed 1; an interrupt 130/143: each error's own code.
    result = run_training(cfg)
    final = result.metrics[-1] if result.metrics else {}
    if final:
        print(f"done: {result.run_dir}  val bpb={final['bpb']:.4f}  wall={result.wall_s:.1f}s", flush=True)


@app.command(epilog="""[bold]Examples[/]\n
  dormouse validate\n
  dormouse validate preset=9m model.use_attnres=true\n
  dormouse validate model.use_attnres=true model.use_gr=true   # refused: exit 2, names both fields\n
  dormouse validate data.path=notes.txt run.name=myrun       # the data and the run directory, too""")
def validate(ctx: typer.Context, overrides: list[str] = OVERRIDES, cfg_flag: str = CFG) -> None:
    """A dry run of `train`: the config, the data source and the run directory; prints the resolved config.

    Exit 2 on anything `train` would refuse before step 0, like `train`. Creates nothing, trains nothing."""
    load_plugins(ctx)
    if cfg_flag is not None:
        _print_job_config(cfg_flag, overrides)
        return
    cfg = _run_config(overrides)
    from dormouse.config.schema import ConfigError
    from dormouse.train.preflight import preflight

    checked = preflight(cfg)
    for line in checked.warnings:
        err.print(f"[bold yellow]warning:[/] {line}", markup=True, soft_wrap=True)
    if checked.problems:
        raise ConfigError(checked.problems)  # exit 2, one error: line each
    # The checks' findings as YAML comments: `dormouse validate ... > config.yaml` stays valid YAML.
    print(OmegaConf.to_yaml(cfg) + "".join(f"# {line}\n" for line in checked.found), end="")


@app.command(epilog="""[bold]Examples[/]\n
  dormouse logs                                     # every run under runs/\n
  dormouse logs runs/attnres-20261129-101500-000000\n
  dormouse logs runs/ab/smoke                       # a comparison: one row per arm\n
  dormouse logs runs/ab/smoke --runs --check        # and every run's table\n
  dormouse logs runs/a/train.log runs/b/train.log\n
  dormouse logs runs/myrun > evals.tsv              # not a terminal: tab-separated rows, every value\n
  dormouse logs runs/ab/smoke --format json | jq '.runs[].findings'""")
def logs(
    ctx: typer.Context,
    paths: list[Path] = typer.Argument(None, help=f"Run directories, A/B directories or train.log files "
                                       f"(default: {RUNS_ROOT}/).", show_default=False),
    check: bool = typer.Option(False, "--check", help="Exit 1 when there is any finding."),
    fmt: str = typer.Option(None, "--format", help="table | tsv | json (default: table on a terminal, else tsv). "
                            "tsv and json hold every value, from metrics.jsonl.", show_default=False),
    runs: bool = typer.Option(False, "--runs", help="A comparison's table: each run's evals too, after the "
                              "row per arm."),
) -> None:
    """Show each run's evals (a table fitted to the terminal, tab-separated rows or JSON) and report findings
    (dead or leaking arms, NaNs, malformed or missing lines); a comparison as one row per arm."""
    load_plugins(ctx)
    from dormouse.cli.logs import logs_command

    raise typer.Exit(logs_command(list(paths or []), check, Console(), fmt=fmt, err_console=err, per_run=runs))


@app.command(epilog="""[bold]Examples[/]\n
  dormouse arms                                        # the built-in arms: switch, options, description\n
  dormouse arms --plugin docs/examples/scalar_gate.py  # with a plugin's arms, and where each came from\n
  dormouse arms --format json | jq '.arms[].name'""")
def arms(ctx: typer.Context,
         fmt: str = typer.Option(None, "--format", help="table | text | json (default: table on a terminal, "
                                 "else text: a tab-separated line per arm, an indented line per option).",
                                 show_default=False)) -> None:
    """List the arms this command knows, built-in and plugin, in registry order: each one's switch, options
    and their defaults, where it came from and what it does."""
    load_plugins(ctx)
    from dormouse.cli.arms import arms_command

    raise typer.Exit(arms_command(Console(), fmt=fmt, err_console=err))


@app.command(name="eval", epilog="""[bold]Examples[/]\n
  dormouse eval runs/myrun                                   # the newest checkpoint\n
  dormouse eval runs/myrun --checkpoint runs/myrun/checkpoints/best.pt""")
def eval_(
    ctx: typer.Context,
    run_dir: Path = typer.Argument(..., help="A run directory written by `dormouse train`."),
    checkpoint: Path = typer.Option(None, "--checkpoint", help="A checkpoint file (default: the run's newest).",
                                    show_default=False),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:N."),
) -> None:
    """Evaluate a checkpoint on its run's fixed eval set and print the eval line (bpb at every depth).

    Writes nothing, to the run or anywhere else."""
    load_plugins(ctx)
    from dormouse.cli.eval import eval_checkpoint
    from dormouse.run.loglines import format_eval_line, format_params

    def loaded(path: Path, step: int, counts: dict[str, int]) -> None:  # which model, before the eval's wait
        err.print(f"checkpoint {path} (step {step}) {format_params(counts)}", highlight=False, markup=False)

    _, row = eval_checkpoint(run_dir, checkpoint, device, on_loaded=loaded)
    print(format_eval_line(row), flush=True)


_SAMPLE = SampleOptions()  # the defaults' one owner (dormouse/cli/sample_options.py)


@app.command(epilog="""[bold]Examples[/]\n
  dormouse sample runs/rezero-20261129-101500-000000\n
  dormouse sample runs/myrun --prompt "ROMEO:" --bytes 200 --depth all --seed 1\n
  dormouse sample runs/myrun --prompt-file prompt.txt --num-samples 3     # seeds 0, 1, 2\n
  dormouse sample runs/myrun --depth 1 --temperature 0          # greedy, read out after iteration 1\n
  dormouse sample runs/myrun --checkpoint runs/myrun/checkpoints/step_00001200.pt --top-k 20""")
def sample(
    ctx: typer.Context,
    run_dir: Path = typer.Argument(..., help="A run directory written by `dormouse train`."),
    prompt: str = typer.Option(None, "--prompt", show_default=False,
                               help=f"Bytes the sample continues, as typed (any bytes; default "
                                    f"{_SAMPLE.prompt_bytes!r})."),
    prompt_file: Path = typer.Option(None, "--prompt-file", show_default=False,
                                     help="Read the prompt's bytes from this file instead."),
    n_bytes: int = typer.Option(_SAMPLE.n_bytes, "--bytes", help="How many bytes to generate."),
    num_samples: int = typer.Option(_SAMPLE.num_samples, "--num-samples",
                                    help="Samples per depth; sample i uses seed --seed + i."),
    temperature: float = typer.Option(_SAMPLE.temperature, "--temperature", help="Softmax temperature; 0 = greedy."),
    top_k: int = typer.Option(_SAMPLE.top_k, "--top-k", help="Sample among the k most likely bytes only.",
                              show_default=False),
    seed: int = typer.Option(_SAMPLE.seed, "--seed", help="Seed of the sampler: the same seed gives the same bytes."),
    depth: str = typer.Option("last", "--depth",
                              help="Read out after iteration k (1..model.max_iter), 'last', or 'all' (side by side)."),
    checkpoint: Path = typer.Option(None, "--checkpoint", help="A checkpoint file (default: the run's newest).",
                                    show_default=False),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:N."),
) -> None:
    """Generate bytes from a run's checkpoint, at one depth or at every depth of the loop."""
    load_plugins(ctx)
    from dormouse.cli.sample import sample_run
    from dormouse.run.loglines import format_params

    def loaded(path: Path, step: int, counts: dict[str, int]) -> None:
        err.print(f"checkpoint {path} (step {step}) {format_params(counts)}; seed {seed}, temperature {temperature}, "
                  f"top-k {top_k or 'none'}", highlight=False, markup=False)

    single = num_samples == 1 and depth != "all"  # one sample streams as it is generated (dormouse.cli.sample)
    opts = SampleOptions(prompt=_prompt_bytes(prompt, prompt_file), n_bytes=n_bytes, temperature=temperature,
                         top_k=top_k, seed=seed, num_samples=num_samples)
    _, _, samples = sample_run(run_dir, opts, depth=depth, checkpoint=checkpoint, device=device,
                               stream=sys.stdout if single else None, on_loaded=loaded)
    if not single:
        _print_samples(samples)


def _prompt_bytes(prompt: str | None, prompt_file: Path | None) -> bytes:
    """The prompt's bytes: ``--prompt`` as the shell passed it (os.fsencode undoes Python's decoding of argv,
    so invalid UTF-8 survives), or ``--prompt-file``'s bytes; not both."""
    from dormouse.cli.sample import SampleError

    if prompt is not None and prompt_file is not None:
        raise SampleError("--prompt and --prompt-file are both given: choose one")
    if prompt_file is not None:
        try:
            return prompt_file.read_bytes()
        except OSError as exc:
            raise SampleError(f"--prompt-file {prompt_file}: {exc.strerror or exc}") from None
    return _SAMPLE.prompt_bytes if prompt is None else os.fsencode(prompt)


def _print_samples(samples: list) -> None:
    """One sample: the prompt and its continuation, plain. Several depths: side by side on a terminal,
    one labelled block each otherwise (a file keeps every byte and no table borders)."""
    out = Console(highlight=False)
    if len(samples) == 1:
        s = samples[0]
        print(s.prompt.decode("utf-8", errors="replace") + s.text, flush=True)
        return
    several = any(s.index for s in samples)  # --num-samples > 1: each block says which sample it is
    if out.is_terminal and not several:
        from rich.table import Table

        table = Table(show_lines=False, expand=True)
        for s in samples:
            table.add_column(f"depth {s.depth}", overflow="fold", ratio=1)
        prompt = samples[0].prompt.decode("utf-8", errors="replace")
        table.add_row(*[Text(prompt + s.text) for s in samples])
        out.print(table)
        return
    for s in samples:
        label = f"depth {s.depth}" + (f", sample {s.index + 1}" if several else "")
        print(f"=== {label} ===\n{s.prompt.decode('utf-8', errors='replace')}{s.text}", flush=True)


app.add_typer(ab_app)  # dormouse ab: its verbs, or a comparison to run (dormouse/cli/ab.py)


def main() -> None:
    app(prog_name="dormouse")


if __name__ == "__main__":
    sys.exit(main())
