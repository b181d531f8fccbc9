"""Perturbations of the compiled training path, ``train.compile_scope=regional`` (tests/falsification; format in
perturbations_attnres.py). ``protects`` names what a defect here would break."""

from __future__ import annotations

_MODEL = "dormouse/model/looped.py"
_T = "tests/model/test_compile_regions.py::"
_ONCE = [_T + f"test_regions_compile_once_for_every_iteration_slot_depth_and_lr[{p}]"
         for p in ("gr-2", "gr-6", "attnres_block-4")]

PERTURBATIONS: list[dict] = [
    {
        "name": "regional_scope_compiles_the_whole_loop",
        "file": _MODEL,
        "function": "LoopedByteLM.compile_regions",
        "old": "        return RegionCompiled(self, backend=backend, mode=mode)\n",
        "new": "        return torch.compile(self, fullgraph=True, backend=backend, mode=mode)\n",
        "gates": _ONCE,
        "why": "the regional scope unrolls the loop into one graph: its compile time grows with model.max_iter "
               "(25+ min at 12 iterations on this CPU), and every depth the loop is asked for is a recompile",
        "protects": "training loop",
    },
    {
        "name": "regions_compiled_from_copies_of_the_sublayers",
        "file": _MODEL,
        "function": "RegionCompiled.__init__",
        "old": "tuple(torch.compile(m, **compiled) for m in model.sublayers)",
        "new": "tuple(torch.compile(__import__('copy').deepcopy(m), **compiled) for m in model.sublayers)",
        "gates": [_T + f"test_regions_give_eager_losses_gradients_and_counts[{a}]"
                  for a in ("rezero", "gr", "attnres_block")] + [_T + "test_inductor_regions_train_to_eager_losses"],
        "why": "the compiled regions hold their own weights: the model the optimizer steps and the checkpoint saves "
               "is not the one that computes the loss, so training stalls while the run looks healthy",
        "protects": "training loop",
    },
    {
        "name": "absorb_region_recompiles_per_slot",
        "file": _MODEL,
        "function": "RegionCompiled.__init__",
        "old": "absorb = torch.compile(absorb, fullgraph=True, dynamic=None, backend=backend, mode=mode)",
        "new": "absorb = torch.compile(absorb, fullgraph=True, dynamic=False, backend=backend, mode=mode)",
        "gates": _ONCE,
        "why": "the slot reaches the arm's region as a constant: one graph per slot, a compile that grows with the "
               "loop again, and past Dynamo's recompile limit (8) a hard error at 5 iterations",
        "protects": "training loop",
    },
    {
        "name": "regions_ignored_by_the_loop",
        "file": _MODEL,
        "function": "LoopedByteLM.forward",
        "old": "        regions = self.eager_regions() if regions is None else regions\n",
        "new": "        regions = self.eager_regions()\n",
        "gates": _ONCE,
        "why": "train.compile=true compiles nothing: the run is eager while its config and log say compiled, and "
               "any speed figure taken from it is the eager one",
        "protects": "training loop",
    },
]
