"""Perturbations of the stable input injection arm (dormouse/arms/injection.py; format in perturbations_attnres.py):
each breaks one piece of ``x <- exp(-exp(delta + a)) * x + exp(delta) B e`` before every iteration."""

from __future__ import annotations

_FILE = "dormouse/arms/injection.py"
_T = "tests/arms/test_injection.py::"
_REF = _T + "test_injection_matches_a_float64_reference_from_the_equations"

PERTURBATIONS: list[dict] = [
    {
        "name": "injection_after_the_iteration",
        "file": _FILE,
        "function": "Injection",
        "old": "            state.x = torch.addcmul(state.inject, state.decay, state.x)\n"
               "        return state.x\n"
               "\n"
               "    def absorb(self, state: _InjectionState, slot: int, output: Tensor) -> _InjectionState:\n"
               "        # every slot: the plain pre-norm residual; ran counts here, once per slot, as the driver's "
               "asked does\n"
               "        state.x = state.x + output\n",
        "new": "            pass\n"
               "        return state.x\n"
               "\n"
               "    def absorb(self, state: _InjectionState, slot: int, output: Tensor) -> _InjectionState:\n"
               "        state.x = state.x + output\n"
               "        if slot % 2 == 1:  # after the MLP slot: the injection closes the iteration\n"
               "            state.x = torch.addcmul(state.inject, state.decay, state.x)\n",
        "gates": [_REF, _T + "test_gold_two_iterations_by_hand"],
        "why": "the injection moved from before the attention slot to after the MLP slot: the first attention "
               "reads the bare initial state and every readout reads a freshly injected state",
        "protects": "mechanism",
    },
    {
        "name": "decay_without_the_minus",
        "file": _FILE,
        "function": "Injection.decay",
        "old": "torch.exp(-torch.exp(self.log_step + self.log_decay))",
        "new": "torch.exp(torch.exp(self.log_step + self.log_decay))",
        "gates": [_T + "test_decay_is_strictly_between_0_and_1_for_any_delta_and_a", _REF],
        "why": "A-bar = exp(+exp(delta + a)) > 1: the recurrence expands instead of contracting (the instability "
               "the mechanism exists to rule out)",
        "protects": "mechanism",
    },
    {
        "name": "b_bar_missing_the_step",
        "file": _FILE,
        "function": "Injection.injected",
        "old": "return torch.exp(self.log_step).to(e.dtype) * (e @ self.B.to(e.dtype).T)",
        "new": "return e @ self.B.to(e.dtype).T",
        "gates": [_T + "test_gold_two_iterations_by_hand", _REF],
        "why": "B-bar = B, not Delta B: the discretisation step no longer scales the input, so delta moves only "
               "the decay and the fixed point is (1 - A-bar)^-1 B e",
        "protects": "mechanism",
    },
    {
        "name": "input_not_normalised",
        "file": _FILE,
        "function": "Injection.injected_input",
        "old": "return rms_norm(embedding, eps=INJECTION_EPS) if self.normalize else embedding",
        "new": "return embedding",
        "gates": [_REF],
        "why": "model.injection.normalize=true but e enters unnormalised: the embedding's scale (std 0.02) sets "
               "the injection's",
        "protects": "mechanism",
    },
    {
        "name": "injection_only_at_the_first_iteration",
        "file": _FILE,
        "function": "Injection.sublayer_input",
        "old": "        if slot % 2 == 0:",
        "new": "        if slot == 0:",
        "gates": [_T + "test_with_zero_sublayer_outputs_the_state_converges_to_the_fixed_point", _REF],
        "why": "e is injected once, before the first iteration only: later iterations decay the state towards "
               "0 with nothing re-injected",
        "protects": "mechanism",
    },
]
