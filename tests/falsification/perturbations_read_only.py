"""Perturbations of the read-only commands' rules: help and --version answer without importing
torch, `dormouse logs` with no path reads runs/ and refuses a folder with no run, and a comparison's folder
is one table, a row per arm, from results.json when the comparison wrote it; `logs` and `ab list` import
no torch (the registry declares the built-in arm names, checked against their classes), `ab list` no
scipy, and a config composes and validates from the arms' torch-free specs (tests/falsification; format in
perturbations_attnres.py, plus ``protects``).
"""

from __future__ import annotations

_FAST = "tests/flows/test_read_only_commands.py::"
_CMP = "tests/flows/test_logs_comparison.py::"
_LOGS = "dormouse/cli/logs.py"
_TABLE = "dormouse/cli/comparison_table.py"
_ARM_REGISTRY = "dormouse/arms/registry.py"
_NAMES = "tests/arms/test_arm_names.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "help_loads_the_plugins_and_torch",
        "file": "dormouse/cli/app.py",
        "function": "_root",
        "old": '    """Train a looped byte-level LM and A/B-compare residual mechanisms (ReZero, GR, AttnRes)."""\n',
        "new": '    """Train a looped byte-level LM and A/B-compare residual mechanisms (ReZero, GR, AttnRes)."""\n'
               "    from dormouse.arms import builtin  # noqa: F401\n",
        "gates": [_FAST + "test_help_and_version_do_not_import_torch"],
        "why": "the root callback loads the arm classes (Click runs it before a command reads its --help): every "
               "`dormouse X --help` imports torch and takes seconds for a text that needs none of it",
        "protects": "training loop",
    },
    {
        "name": "logs_without_a_path_reads_nothing",
        "file": _LOGS,
        "function": "logs_command",
        "old": "    paths = [Path(p) for p in paths] or [RUNS_ROOT]\n",
        "new": "    paths = [Path(p) for p in paths]\n",
        "gates": [_CMP + "test_logs_without_a_path_reads_runs"],
        "why": "`dormouse logs` with no path reads no run and says '0 run(s), no findings' where runs/ holds "
               "the user's runs",
        "protects": "counters",
    },
    {
        "name": "logs_reads_a_folder_with_no_run_as_one",
        "file": _LOGS,
        "function": "_holds_runs",
        "old": "    return path.is_file() or files.log.is_file()",
        "new": "    return True or path.is_file() or files.log.is_file()",
        "gates": [_CMP + "test_logs_of_a_folder_with_no_run_is_an_error"],
        "why": "`dormouse logs /etc` prints a finding and exits 0, as if a folder with no run were a run that "
               "never started: a typo'd path passes a script's check",
        "protects": "counters",
    },
    {
        "name": "comparison_table_recomputes_past_results_json",
        "file": _TABLE,
        "function": "arm_rows",
        "old": "        if said is not None:",
        "new": "        if False:",
        "gates": [_CMP + "test_a_comparison_takes_its_numbers_and_verdicts_from_results_json"],
        "why": "the summary recomputes the means from every finished run and shows no verdict: a bad run the "
               "analysis replaced would count, and the table would disagree with the report",
        "protects": "A/B rule",
    },
    {
        "name": "comparison_table_delta_sign_flipped",
        "file": _TABLE,
        "function": "arm_rows",
        "old": "paired = [b - base_bpb[k] for k",
        "new": "paired = [base_bpb[k] - b for k",
        "gates": [_CMP + "test_a_comparison_is_one_row_per_arm_with_mean_and_delta_from_its_runs"],
        "why": "Δ read as baseline − arm: an arm with lower bpb shows a positive Δ, the opposite of results.json "
               "and the report",
        "protects": "A/B rule",
    },
    {
        "name": "comparison_summary_hides_the_runs_findings",
        "file": _LOGS,
        "function": "_print_tables",
        "old": "            for f in run.findings:  # a finding is never hidden behind the summary\n",
        "new": "            for f in []:\n",
        "gates": [_CMP + "test_a_comparison_summary_still_lists_every_finding"],
        "why": "behind the row per arm a leaking arm or a NaN in one run is no longer printed: only the exit "
               "code of --check would say there is something",
        "protects": "counters",
    },
    {
        "name": "comparison_prints_every_runs_table_anyway",
        "file": _LOGS,
        "function": "_print_tables",
        "old": "        if run.run_dir.resolve() in summarized and not per_run:\n",
        "new": "        if False:\n",
        "gates": [_CMP + "test_a_comparison_shows_each_runs_table_only_with_runs"],
        "why": "a comparison prints one table per run (12 for a small one) under the summary; the "
               "runs are on request (--runs)",
        "protects": "counters",
    },
    # --- the arm names without the arm classes: logs and ab list import no torch -----------------------
    {
        "name": "arms_package_defines_the_builtin_arms",
        "file": "dormouse/arms/__init__.py",
        "function": "<module>",
        "old": "the built-in ones.\"\"\"\n",
        "new": "the built-in ones.\"\"\"\n\nfrom dormouse.arms import builtin  # noqa: F401\n",
        "gates": [_FAST + "test_logs_of_runs_and_a_comparison_does_not_import_torch",
                  _FAST + "test_ab_list_imports_neither_torch_nor_scipy",
                  _NAMES + "test_the_arm_names_and_a_configs_arm_are_read_without_importing_torch"],
        "why": "importing any dormouse.arms module (the registry, the plugin loader) defines the built-in arms "
               "again, so `dormouse logs` and `ab list` import torch: seconds for commands that read files",
        "protects": "training loop",
    },
    {
        "name": "reader_works_out_the_arm_through_the_arm_classes",
        "file": "dormouse/run/reader.py",
        "function": "_read_config",
        "old": "        run.config_arm = model_arm(cfg.model)\n",
        "new": "        run.config_arm = __import__(\"dormouse.arms.builtin\") and model_arm(cfg.model)\n",
        "gates": [_FAST + "test_logs_of_runs_and_a_comparison_does_not_import_torch"],
        "why": "the reader loads the arm classes (nn.Modules) to name the arm a run trained: every "
               "`dormouse logs` of a run with a config.yaml imports torch",
        "protects": "training loop",
    },
    {
        "name": "ab_list_computes_the_boundaries_to_validate",
        "file": "dormouse/ab/comparison/registry.py",
        "function": "_v2_problems",
        "old": "    problems = dict(spec.design().field_problems())\n",
        "new": "    problems = dict(spec.design().field_problems())\n    if not problems:\n"
               "        __import__(\"dormouse.ab.rule.sequential\", fromlist=[\"boundaries\"]).boundaries(spec.design())\n",
        "gates": [_FAST + "test_ab_list_imports_neither_torch_nor_scipy"],
        "why": "validating a registration computes the design's boundaries (scipy): `dormouse ab list` "
               "imports scipy for numbers it never prints",
        "protects": "A/B rule",
    },
    {
        "name": "undeclared_builtin_arm_accepted",
        "file": _ARM_REGISTRY,
        "function": "register_arm",
        "old": "    if builtin and name not in BUILTIN_ARMS:\n",
        "new": "    if False:\n",
        "gates": [_NAMES + "test_a_builtin_arm_the_registry_does_not_declare_is_refused"],
        "why": "a new built-in arm defined without its name in BUILTIN_ARMS registers after the plugins' arms "
               "and is missing from every name read without the classes (`dormouse logs`' counters, checks)",
        "protects": "arms' set-up",
    },
    {
        "name": "second_default_arm_accepted",
        "file": _ARM_REGISTRY,
        "function": "register_arm",
        "old": "    if bool(cls.default) != (name == DEFAULT_ARM):\n",
        "new": "    if False:\n",
        "gates": [_NAMES + "test_a_second_default_arm_is_refused"],
        "why": "an arm declaring default=True registers while DEFAULT_ARM names another: the schema gives it "
               "no switch, yet a config with every switch off selects DEFAULT_ARM",
        "protects": "arms' set-up",
    },
    {
        "name": "declared_arm_without_a_class_read_silently",
        "file": _ARM_REGISTRY,
        "function": "arm_classes",
        "old": "    if missing:\n",
        "new": "    if False:\n",
        "gates": [_NAMES + "test_a_declared_arm_no_class_defines_is_refused_when_the_classes_are_read"],
        "why": "reading the arm classes without dormouse.arms.builtin imported (or with a declared arm no class "
               "defines) returns fewer arms than the names say: a schema without their switches, silently",
        "protects": "arms' set-up",
    },
    {
        "name": "arm_specs_import_torch",
        "file": "dormouse/arms/specs.py",
        "function": "<module>",
        "old": "from dormouse.arms.registry import arm_names, arm_switch, defined_arm_classes\n",
        "new": "import torch  # noqa: F401\nfrom dormouse.arms.registry import arm_names, arm_switch, defined_arm_classes\n",
        "gates": [_FAST + "test_a_comparisons_configs_compose_and_validate_without_torch"],
        "why": "the arms' specs, which the config schema is built from, import torch: composing or validating "
               "any config (a comparison's plan, a sweep's) takes torch's seconds for dataclasses and option checks",
        "protects": "arms' set-up",
    },
    {
        "name": "plan_imports_the_machine_check",
        "file": "dormouse/ab/comparison/plan.py",
        "function": "<module>",
        "old": "from dormouse.data import DataError, read_corpus\n",
        "new": "from dormouse.data import DataError, read_corpus\n"
               "from dormouse.train.preflight import environment_problems  # noqa: F401\n",
        "gates": [_FAST + "test_read_only_ab_verbs_import_no_torch"],
        "why": "the plan imports the machine check (torch, the arm classes) at its top: `ab plan`, `status` and "
               "`design` take torch's seconds to read a registration and a few files",
        "protects": "A/B rule",
    },
]
