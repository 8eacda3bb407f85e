"""AtP*'s GradDrop (headwatch/patching/attribution.py: ``graddrop_estimates``, protocol §5e) against a
direct implementation that shares none of its code, by hand where the definition leaves one
answer, and its rows in the blind-spots table."""
import numpy as np
import pytest
import torch

from headwatch.model.arch import Adapter
from headwatch.patching.attribution import GRADDROP, SITES, blind_spots, graddrop_estimates, qk_estimates
from headwatch.patching.attribution import attribution_patching
from tiny import FAMILIES, patching_prompts, tiny_model


# ------------------------------------------------------------------ the direct implementation
def _run(model, ids, drop=None, patch=None):
    """One forward pass of a tiny Llama with plain PyTorch hooks: (the logits at the last position,
    ``{"z", "p", "q", "k"}`` → ``{layer: tensor}``: each layer's output-projection input, attention
    weights, query and key projection outputs). ``drop``: block ``drop`` returns its input +
    (its output − its input).detach(), an explicitly detached contribution; ``patch``: (layer,
    "q" or "k", feature slice, values) written into that projection's output."""
    seen, handles = {"z": {}, "p": {}, "q": {}, "k": {}}, []
    for l, block in enumerate(model.model.layers):
        attn = block.self_attn
        handles.append(attn.o_proj.register_forward_pre_hook(lambda m, args, l=l: seen["z"].__setitem__(l, args[0])))
        handles.append(attn.register_forward_hook(lambda m, args, out, l=l: seen["p"].__setitem__(l, out[1])))
        for name, proj in (("q", attn.q_proj), ("k", attn.k_proj)):
            def keep(m, args, out, l=l, name=name):
                if patch is not None and patch[:2] == (l, name):
                    out = out.clone()
                    out[..., patch[2]] = patch[3]
                seen[name][l] = out
                return out
            handles.append(proj.register_forward_hook(keep))
        if l == drop:
            def detached(m, args, kwargs, out):
                x = args[0] if args else kwargs["hidden_states"]
                y = out[0] if isinstance(out, tuple) else out
                y = x + (y - x).detach()
                return (y,) + tuple(out[1:]) if isinstance(out, tuple) else y
            handles.append(block.register_forward_hook(detached, with_kwargs=True))
    try:
        return model(input_ids=ids, use_cache=False).logits[:, -1], seen
    finally:
        for h in handles:
            h.remove()


def _direct_graddrop(model, prompts):
    """GradDrop by its definition, one prompt and one dropped layer at a time: the prompt's logit
    difference differentiated with torch.autograd.grad at every layer's z and attention weights;
    per head, the plain z estimate, and the QK-fixed q (k: every head of the group) estimate with
    the patched pattern the model itself computes when that head's query (that group's key)
    comes from the clean run; then the mean over prompts of 1/(L − 1) · Σ over dropped layers of
    |estimate|. ``{site: [layers, units]}``."""
    cfg = model.config
    L, H, G = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads
    d = cfg.hidden_size // H
    total = {"z": np.zeros((L, H)), "q": np.zeros((L, H)), "k": np.zeros((L, G))}
    clean, corrupted, answer, distractor = prompts.clean, prompts.corrupted, prompts.answer, prompts.distractor
    n = len(clean)
    for i in range(n):
        c, x = clean[i:i + 1], corrupted[i:i + 1]
        with torch.no_grad():
            _, cl = _run(model, c)
            _, base = _run(model, x)
            moved = {(l, "q", h): _run(model, x, patch=(l, "q", slice(h * d, (h + 1) * d),
                                                        cl["q"][l][..., h * d:(h + 1) * d]))[1]["p"][l]
                     for l in range(L) for h in range(H)}
            moved.update({(l, "k", g): _run(model, x, patch=(l, "k", slice(g * d, (g + 1) * d),
                                                             cl["k"][l][..., g * d:(g + 1) * d]))[1]["p"][l]
                          for l in range(L) for g in range(G)})
        for drop in range(L):
            with torch.enable_grad():
                logits, run = _run(model, x, drop=drop)
                ld = logits[0, answer[i]] - logits[0, distractor[i]]
                wrt = [run["z"][l] for l in range(L)] + [run["p"][l] for l in range(L)]
                grads = [torch.zeros_like(t) if g is None else g
                         for t, g in zip(wrt, torch.autograd.grad(ld, wrt, allow_unused=True))]
            for l in range(L):
                gz, gp, dz = grads[l], grads[L + l], cl["z"][l] - run["z"][l].detach()
                for h in range(H):
                    z_est = (gz[..., h * d:(h + 1) * d] * dz[..., h * d:(h + 1) * d]).sum()
                    q_est = (gp[0, h] * (moved[(l, "q", h)][0, h] - base["p"][l][0, h])).sum()
                    total["z"][l, h] += abs(float(z_est)) / (L - 1) / n
                    total["q"][l, h] += abs(float(q_est)) / (L - 1) / n
                for g in range(G):
                    k_est = sum((gp[0, h] * (moved[(l, "k", g)][0, h] - base["p"][l][0, h])).sum()
                                for h in range(g * H // G, (g + 1) * H // G))
                    total["k"][l, g] += abs(float(k_est)) / (L - 1) / n
    return total


def test_graddrop_equals_its_direct_implementation():
    """On a tiny Llama (3 layers, 4 heads in 2 key/value groups), in float64: every unit of z, q
    and k, batched two prompts at a time, against the direct implementation."""
    model = tiny_model("llama").double()
    prompts = patching_prompts(4, 10)
    got = graddrop_estimates(model, Adapter(model), prompts, batch=2)
    want = _direct_graddrop(model, prompts)
    for site in SITES:
        scale = np.abs(want[site]).max()
        assert scale > 1e-3, site                                           # the estimates are not all 0
        np.testing.assert_allclose(got[site].numpy(), want[site], rtol=1e-4, atol=1e-5 * scale, err_msg=site)
    # GradDrop is not the plain estimate in magnitude: dropping a layer changes what earlier layers get
    plain = attribution_patching(model, Adapter(model), prompts, batch=2).numpy()
    assert np.abs(np.abs(plain[0]) - got["z"].numpy()[0]).max() > 1e-3 * np.abs(plain).max()


@pytest.mark.parametrize("family", FAMILIES)
def test_the_last_layers_graddrop_is_the_mean_magnitude_of_each_prompts_estimate(family):
    """By hand from the definition: a unit of the last layer gets 0 when its own block is dropped
    and its own gradient when any earlier block is (nothing after it passes through them), so its
    GradDrop is (L − 1) / (L − 1) × the mean over prompts of |its one-prompt estimate| — plain at
    z, AtP* at q and k, each prompt estimated alone."""
    model = tiny_model(family)
    a = Adapter(model)
    prompts = patching_prompts(3, 9)
    got = graddrop_estimates(model, a, prompts, batch=2)
    alone = [(attribution_patching(model, a, prompts.rows(slice(i, i + 1))),
              qk_estimates(model, a, prompts.rows(slice(i, i + 1))))
             for i in range(len(prompts))]
    want = {"z": np.mean([np.abs(z[-1].numpy()) for z, _ in alone], axis=0),
            "q": np.mean([np.abs(qk["q"]["atp*"][-1].numpy()) for _, qk in alone], axis=0),
            "k": np.mean([np.abs(qk["k"]["atp*"][-1].numpy()) for _, qk in alone], axis=0)}
    for site in SITES:
        assert want[site].max() > 1e-4, (family, site)
        np.testing.assert_allclose(got[site][-1].numpy(), want[site], rtol=1e-4, atol=1e-6 * want[site].max(),
                                   err_msg=f"{family} {site}")
        assert (got[site] >= 0).all()


def test_graddrop_needs_two_layers():
    model = tiny_model("llama", layers=1)
    with pytest.raises(ValueError, match="L − 1 layers .* 1 layer"):
        graddrop_estimates(model, Adapter(model), patching_prompts(2, 9))


def test_the_blind_spots_table_has_the_graddrop_rows_with_their_passes():
    model = tiny_model("llama")
    a = Adapter(model)
    prompts = patching_prompts(4, 10)
    table, effects = blind_spots(model, a, prompts, batch=3, top_k=3)
    assert list(table["site"]) == [x for x in SITES for _ in range(4)]
    gd = table[table["method"].str.startswith(GRADDROP)]
    assert list(gd["site"]) == list(SITES) and gd["method"].iloc[0].endswith("no softmax to fix at z)")
    batches, L = 2, a.n_layers                       # 4 prompts in batches of 3
    assert (gd["forward_passes"] == (1 + L) * batches).all() and (gd["backward_passes"] == L * batches).all()
    assert gd["seconds"].nunique() == 1 and (gd["false_negatives"] <= 3).all()
    assert effects["k"][GRADDROP].shape == (L, a.n_kv_heads) and (effects["q"][GRADDROP] >= 0).all()
    without, _ = blind_spots(model, a, prompts, batch=3, top_k=3, graddrop=False)
    assert len(without) == 9 and not without["method"].str.startswith(GRADDROP).any()
