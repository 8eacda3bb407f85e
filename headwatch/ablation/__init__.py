"""Cutting heads (protocol §5; rules ablation_topk, ablation_circuit, ablation_attribution,
ablation_guards).

    cut          a head cut at its voice (zero or mean), batched over many cuts per forward pass
    experiments  5a targeted against random cuts, 5b the circuit, 5c every head alone
    guards       the guards of §5: the hook against the weights, the model restored, the control
"""
