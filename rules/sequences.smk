# Stage "sequences": the seeded random sets, prose and phrases (protocol §2), one
# table per set so that changing a phrase reruns only what reads phrases.


rule sequences_make:
    input:
        model=paths.prepared("{model}"),
    output:
        paths.sequence_table("{model}", "{set}"),
    params:
        spec=sequence_params,
    log:
        paths.log("sequences_make", "{model}", "{set}"),
    benchmark:
        paths.benchmark("sequences_make", "{model}", "{set}")
    conda:
        "../environment.yml"
    script:
        "../scripts/sequences_make.py"
