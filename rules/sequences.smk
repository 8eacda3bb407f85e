# Stage "sequences": the seeded random sets, prose and phrases (protocol §2), one
# table per set so that changing a phrase reruns only what reads phrases.
from headwatch.sequences import set_params


def sequences_targets():
    return expand_models(f"{RESULTS}/{{model}}/sequences/{{set}}.parquet",
                         set=["induction", "eval", "circuit", "prose", "phrases"])


def sequence_table(model, name):
    return f"{RESULTS}/{model}/sequences/{name}.parquet"


rule sequences_make:
    input:
        model=lambda w: prepared(w.model),
    output:
        f"{RESULTS}/{{model}}/sequences/{{set}}.parquet",
    params:
        spec=lambda w: set_params(w.set, config),
    log:
        f"{RESULTS}/logs/sequences_make/{{model}}/{{set}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/sequences_make/{{model}}/{{set}}.tsv"
    script:
        "../scripts/sequences_make.py"
