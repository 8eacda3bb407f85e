"""The induction sweep (protocol §7c; rules induction_train, induction_summary): which heads form,
when, and how the number of heads changes it, on tasks where predicting from the context is the
only way down.

    tasks     seeded generators of the tasks and their controls, and each task's references
    train     one model on one task, evaluated as it learns; the final previous-token -> induction edge
    analysis  the phase change, formation and lag per run; intervals, contrasts and verdicts per shape
"""
