"""Perturbations of what the code fingerprint covers (dormouse/ab/comparison/fingerprint.py): each drops one
source that computes a run from the fingerprint, or adds one that does not, and tests/ab/test_fingerprint_covers.py
must go red (tests/falsification; format in perturbations_attnres.py). A source left out is one whose edit joins
a resumed comparison unseen; one wrongly added invalidates a running comparison for an edit that changes no run.
"""

from __future__ import annotations

_FP = "dormouse/ab/comparison/fingerprint.py"
_C = "tests/ab/test_fingerprint_covers.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "fingerprint_leaves_out_plugins",
        "file": _FP,
        "function": "source_digests",
        "old": "    out.update(plugin_digests())\n",
        "new": "",
        "gates": [_C + "test_a_loaded_plugin_file_is_covered_and_an_edit_since_loading_is_named"],
        "why": "a plugin arm's source is not in the fingerprint: an edit to the arm a comparison tests joins "
               "the resumed comparison unseen, its later runs computed by other code than its earlier ones",
        "protects": "A/B rule",
    },
    {
        "name": "fingerprint_takes_plugin_hash_from_load_time",
        "file": _FP,
        "function": "plugin_digests",
        "old": "        digests = file_digests(plugin.module, Path(plugin.file))\n",
        "new": "        digests = {Path(plugin.file).name: plugin.sha256}\n",
        "gates": [_C + "test_a_loaded_plugin_file_is_covered_and_an_edit_since_loading_is_named"],
        "why": "the fingerprint takes a plugin's sha256 from when it was loaded: a long-lived process (the "
               "comparison's driver) does not see the plugin edited since, and its jobs run the new source",
        "protects": "A/B rule",
    },
    {
        "name": "fingerprint_hashes_only_a_plugin_package_init",
        "file": "dormouse/arms/plugins.py",
        "function": "source_files",
        "old": "    return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob(\"*.py\")) if \"__pycache__\" "
               "not in p.parts}\n",
        "new": "    return {module_file.relative_to(root).as_posix(): module_file}\n",
        "gates": [_C + "test_every_source_file_of_a_package_plugin_is_covered"],
        "why": "a plugin package's modules other than its __init__.py are not in the fingerprint: the arm "
               "defined in one of them can change unseen",
        "protects": "A/B rule",
    },
    {
        "name": "fingerprint_leaves_out_a_subpackage",
        "file": _FP,
        "function": "_SKIP_PACKAGE",
        "old": "_SKIP_PACKAGE = {\"ab\", \"conf\"}",
        "new": "_SKIP_PACKAGE = {\"ab\", \"conf\", \"train\"}",
        "gates": [_C + "test_every_source_tree_of_the_package_is_covered[train]"],
        "why": "an edit of the training loop joins a resumed comparison unseen",
        "protects": "A/B rule",
    },
    {
        "name": "fingerprint_leaves_out_loose_modules",
        "file": _FP,
        "function": "source_digests",
        "old": "            if rel.parts[0] in skip or \"__pycache__\" in rel.parts:\n",
        "new": "            if rel.parts[0] in skip or \"__pycache__\" in rel.parts or len(rel.parts) == 1:\n",
        "gates": [_C + "test_every_source_tree_of_the_package_is_covered[data.py]"],
        "why": "the modules at the top of a tree (dormouse/data.py, the data pipeline) are not in the "
               "fingerprint: an edit of how batches are drawn joins a resumed comparison unseen",
        "protects": "A/B rule",
    },
    {
        "name": "fingerprint_leaves_out_kernels",
        "file": _FP,
        "function": "_roots",
        "old": "            (\"kernels\", Path(dormouse_kernels.__file__).resolve().parent, set(), \"*.py\"),\n",
        "new": "",
        "gates": [_C + "test_the_kernels_are_covered"],
        "why": "the fused AttnRes kernels are not in the fingerprint: a reordered sum in a kernel (0.01 "
               "bpb) joins a resumed comparison unseen",
        "protects": "A/B rule",
    },
    {
        "name": "fingerprint_leaves_out_configs",
        "file": _FP,
        "function": "_roots",
        "old": "            (\"conf\", conf, _SKIP_CONF, \"*.yaml\")]",
        "new": "            ]",
        "gates": [_C + "test_every_config_tree_is_covered[config.yaml]",
                  _C + "test_every_config_tree_is_covered[preset]"],
        "why": "the configs a run is composed from are not in the fingerprint: a changed default or preset "
               "joins a resumed comparison unseen",
        "protects": "A/B rule",
    },
    {
        "name": "fingerprint_leaves_out_corpus",
        "file": _FP,
        "function": "_roots",
        "old": "            (\"dormouse/corpus\", pkg / \"corpus\", set(), \"*.gz\"),",
        "new": "",
        "gates": [_C + "test_the_embedded_corpus_is_covered"],
        "why": "the embedded corpus is not in the fingerprint: runs trained on another text join a resumed "
               "comparison unseen",
        "protects": "A/B rule",
    },
    {
        "name": "fingerprint_ignores_torch_version",
        "file": _FP,
        "function": "compute",
        "old": "    blob += f\"\\ntorch {torch.__version__}\\npython {platform.python_version()}\\n\"\n",
        "new": "    blob += f\"\\npython {platform.python_version()}\\n\"\n",
        "gates": [_C + "test_the_torch_version_is_covered"],
        "why": "another torch (other kernels, other rounding) computes runs that join a resumed comparison",
        "protects": "A/B rule",
    },
    {
        "name": "fingerprint_ignores_python_version",
        "file": _FP,
        "function": "compute",
        "old": "    blob += f\"\\ntorch {torch.__version__}\\npython {platform.python_version()}\\n\"\n",
        "new": "    blob += f\"\\ntorch {torch.__version__}\\n\"\n",
        "gates": [_C + "test_the_python_version_is_covered"],
        "why": "runs computed under another Python join a resumed comparison unseen",
        "protects": "A/B rule",
    },
    {
        "name": "fingerprint_covers_the_comparison_machinery",
        "file": _FP,
        "function": "_SKIP_PACKAGE",
        "old": "_SKIP_PACKAGE = {\"ab\", \"conf\"}",
        "new": "_SKIP_PACKAGE = {\"conf\"}",
        "gates": [_C + "test_the_comparison_machinery_registrations_and_launchers_are_not_covered[dormouse/ab]"],
        "why": "an edit of how a comparison plans or reports (no run computes differently) refuses every "
               "resumed comparison until --restart discards its runs",
        "protects": "A/B rule",
    },
    {
        "name": "fingerprint_covers_the_registrations",
        "file": _FP,
        "function": "_SKIP_CONF",
        "old": "_SKIP_CONF = {\"ab\", \"launcher\"}",
        "new": "_SKIP_CONF = {\"launcher\"}",
        "gates": [_C + "test_the_comparison_machinery_registrations_and_launchers_are_not_covered[conf/ab]"],
        "why": "registering a new comparison (a new conf/ab/*.yaml) refuses every running comparison: the "
               "registration hash already binds what a registration hands a run",
        "protects": "A/B rule",
    },
]
