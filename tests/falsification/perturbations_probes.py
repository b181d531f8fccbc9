"""Perturbations of the learned-value probes and their plots, the sampler and the CLI surface (the
bars and streamed samples included; tests/falsification; format in perturbations_attnres.py).
``protects`` names what the gate guards."""

from __future__ import annotations

_ARMS = "dormouse/arms/base.py"  # each arm's probes are its own (ResidualArm.learned)
_READ = "dormouse/ops/attnres.py"  # the depth-attention weights share the read's score (depth_weights)
_T = "tests/arms/test_probes_learned.py::"

PERTURBATIONS: list[dict] = [
    {
        "name": "probe_weights_before_softmax",
        "file": _READ,
        "function": "depth_weights",
        "old": "        return torch.softmax(scores, dim=0)\n",
        "new": "        return scores\n",
        "gates": [_T + "test_attnres_map_equals_an_independent_float64_recomputation"],
        "why": "the depth-attention map shows the raw scores, not the softmax weights the read mixes with",
        "protects": "probes",
    },
    {
        "name": "probe_key_norm_without_eps",
        "file": _READ,
        "function": "depth_weights",
        "old": "_source_scores(xs, [_inv_rms(x, eps) for x in xs]",
        "new": "_source_scores(xs, [_inv_rms(x, 0.0) for x in xs]",
        "gates": [_T + "test_attnres_map_equals_an_independent_float64_recomputation"],
        "why": "the probe's key RMSNorm drops the model's eps: a map slightly off the weights the model used",
        "protects": "probes",
    },
    {
        "name": "probe_readout_misses_last_iteration",
        "file": "dormouse/arms/attnres.py",
        "function": "AttnRes.learned",
        "old": "else trace.outputs[:2 * (r - self.n_slots + 1)]\n",
        "new": "else trace.outputs[:2 * (r - self.n_slots) + 1]\n",
        "gates": [_T + "test_attnres_map_equals_an_independent_float64_recomputation"],
        "why": "the readout rows of the map are computed over the wrong source set (the last MLP output missing)",
        "protects": "probes",
    },
    {
        "name": "probe_gr_spread_over_slots_not_channels",
        "file": "dormouse/arms/gr.py",
        "function": "GatedResidual.learned",
        "old": "                \"gate_spread\": [float(v) for v in per_channel.std(dim=1, unbiased=False)]}\n",
        "new": "                \"gate_spread\": [float(per_channel.mean(dim=1).std(unbiased=False))]"
               " * per_channel.shape[0]}\n",
        "gates": [_T + "test_gr_gates_equal_a_float64_recomputation_and_start_at_sigmoid_minus_2"],
        "why": "GR's gate spread is taken over slots instead of over channels",
        "protects": "probes",
    },
    {
        "name": "probe_gr_gate_of_the_wrong_slot",
        "file": "dormouse/arms/gr.py",
        "function": "GatedResidual.learned",
        "old": "                gate = self.gate(h, s)\n",
        "new": "                gate = self.gate(h, 0)\n",
        "gates": [_T + "test_gr_gates_equal_a_float64_recomputation_and_start_at_sigmoid_minus_2"],
        "why": "the GR probe reads every slot's input through slot 0's gate (its bias and attention W): the "
               "reported gates are not the ones each slot applied",
        "protects": "probes",
    },
    {
        "name": "sample_depth_ignored",
        "file": "dormouse/cli/sample.py",
        "function": "generate",
        "old": "            logits = model(seq[:, -context:], depth=depth, readouts=\"last\")"
               "[-1][0, -1].float().cpu()\n",
        "new": "            logits = model(seq[:, -context:], readouts=\"last\")[-1][0, -1].float().cpu()\n",
        "gates": ["tests/flows/test_sample.py::test_each_depth_reads_out_after_its_own_iteration"],
        "why": "--depth k samples from the last readout whatever k is asked",
        "protects": "data/eval",
    },
    {
        "name": "atomic_write_keeps_mkstemp_0600",
        "file": "dormouse/run/checkpoint.py",
        "function": "atomic_save_bytes",
        "old": "        os.fchmod(fd, mode)\n",
        "new": "        pass\n",
        "gates": ["tests/run/test_checkpoint.py::test_new_files_get_0666_minus_the_umask"],
        "why": "atomic writes ignore the umask: reports and checkpoints are private (0600) on a shared cluster",
        "protects": "training loop",
    },
    {
        "name": "rezero_alpha_averaged_with_its_sign",
        "file": "dormouse/arms/rezero.py",
        "function": "ReZero.mean_over_seeds",
        "old": "            magnitudes = np.abs(np.array(alphas, dtype=float))\n",
        "new": "            magnitudes = np.array(alphas, dtype=float)\n",
        "gates": ["tests/ab/test_ab_plots.py::test_rezero_alpha_is_averaged_over_seeds_as_a_magnitude"],
        "why": "the A/B report's ReZero plot averages signed alpha over seeds: two seeds that use a slot with "
               "opposite signs (a symmetry of the shared projections) show it as unused",
        "protects": "probes",
    },
    {
        "name": "slot_plot_without_sublayer_legend",
        "file": "dormouse/arms/plots.py",
        "function": "plot_slot_values",
        "old": "    handles = [Patch(color=\"C0\", label=\"attention\"), Patch(color=\"C1\", label=\"MLP\")]\n",
        "new": "    handles = []\n",
        "gates": ["tests/arms/test_probe_plots.py::test_slot_plot_says_which_colour_is_which_sublayer_and_keeps_the_init"
                  "_line_in_view"],
        "why": "blue and orange bars with nothing saying which is attention and which is MLP",
        "protects": "probes",
    },
    {
        "name": "map_layout_not_constrained",
        "file": "dormouse/arms/plots.py",
        "function": "plot_attnres_map",
        "old": "                 layout=\"constrained\")\n",
        "new": "                 layout=None)\n",
        "gates": ["tests/arms/test_probe_plots.py::test_map_with_few_sources_keeps_entropies_clear_of_the_colour_bar_and"
                  "_the_title_whole"],
        "why": "the map laid out by hand: with few sources the entropies run under the colour bar",
        "protects": "probes",
    },
    {
        "name": "comparison_gate_bars_are_channel_spread",
        "file": "dormouse/arms/gr.py",
        "function": "GatedResidual.mean_over_seeds",
        "old": "        out = {k: v for k, v in super().mean_over_seeds(rows).items() if k != \"probe/gate_spread\"}\n",
        "new": "        out = super().mean_over_seeds(rows)\n",
        "gates": ["tests/arms/test_probe_plots.py::test_error_bars_say_what_they_are_the_same_way_for_every_arm"],
        "why": "a comparison's gate plot carries the seeds' mean sd over channels beside an |alpha| plot whose "
               "bars are the sd over seeds",
        "protects": "probes",
    },
    {
        "name": "slot_plot_names_bars_it_does_not_draw",
        "file": "dormouse/arms/plots.py",
        "function": "spread_label",
        "old": "    return f\"{quantity} (bars: sd over {over})\" if spread is not None else quantity\n",
        "new": "    return f\"{quantity} (bars: sd over {over})\"\n",
        "gates": ["tests/arms/test_probe_plots.py::test_error_bars_say_what_they_are_the_same_way_for_every_arm"],
        "why": "a one-seed comparison's plot says 'bars: sd over seeds' and draws none",
        "protects": "probes",
    },
    {
        "name": "sample_streams_nothing_until_the_end",
        "file": "dormouse/cli/sample.py",
        "function": "generate",
        "old": "                on_byte(bytes((nxt,)))\n",
        "new": "                pass\n",
        "gates": ["tests/flows/test_sample.py::test_one_sample_streams_each_byte_as_it_is_generated_flushed"],
        "why": "the bytes are drawn but not handed on: `sample --bytes 100000` shows nothing for minutes",
        "protects": "training loop",
    },
]
