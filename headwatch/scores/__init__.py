"""What every head does (protocol §2–§4; rules sequences_make, attention_maps, scores_heads).

    sequences  the seeded token sets, the prose and the phrases (torch-free at import: the
               Snakefile and the pre-job checks read it)
    attention  attention maps and next-token predictions for the phrases
    heads      the four scores — sink, prev, self, induction — reduced inside the forward pass

Nothing is imported here, so that ``headwatch.scores.sequences`` stays importable without torch.
"""
