"""Perturbations of two gates the verdict path keeps (tests/falsification; format in
perturbations_attnres.py, plus ``protects``).

An audit applied plausible one-line defects to the code that decides a verdict; these two left the suite
green (gradient clipping was caught only by chance, by a DDP parity test that is flaky under load). Each now
has a deterministic gate in tests/ab/test_verdict_gates.py.
"""

from __future__ import annotations

_TRAIN = "dormouse/train/loop.py"
_MODEL = "dormouse/model/looped.py"
_G = "tests/ab/test_verdict_gates.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "seed_not_passed_to_the_model",
        "file": _TRAIN,
        "function": "_train",
        "old": "    model = LoopedByteLM(cfg.model, seed=int(t.seed), kernel=kernel).to(device)\n",
        "new": "    model = LoopedByteLM(cfg.model, seed=0, kernel=kernel).to(device)\n",
        "gates": [_G + "test_the_seed_reaches_the_shared_initial_weights_and_data_seed_only_the_data_order"],
        "why": "every replicate of a comparison starts from the same weights: the seeds measure the data order "
               "alone and the verdict's spread is too small",
        "protects": "arms' set-up",
    },
    {
        "name": "shared_init_stream_ignores_the_seed",
        "file": _MODEL,
        "function": "LoopedByteLM.init_weights",
        "old": "        shared = torch.Generator().manual_seed(seed)\n",
        "new": "        shared = torch.Generator().manual_seed(0)\n",
        "gates": [_G + "test_the_seed_reaches_the_shared_initial_weights_and_data_seed_only_the_data_order"],
        "why": "the shared weights' RNG stream is keyed on a constant: every seed starts from the same weights",
        "protects": "arms' set-up",
    },
    {
        "name": "grad_clip_never_applied",
        "file": _TRAIN,
        "function": "train_step",
        "old": "            run.model.parameters(), float(t.grad_clip) if t.grad_clip > 0 else math.inf)\n",
        "new": "            run.model.parameters(), math.inf)\n",
        "gates": [_G + "test_the_optimizer_steps_with_clipped_gradients_when_grad_clip_is_set"],
        "why": "train.grad_clip is read but never applied: the optimizer steps with unclipped gradients (the "
               "norm is still measured, so the non-finite check and the logs look unchanged)",
        "protects": "training loop",
    },
]
