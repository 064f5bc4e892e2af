rule verify:
    input:
        codes_stats=lambda wildcards: list(get_codes_stats(wildcards).values()),
        catalog=get_dataset_file("catalog"),
        plan=DS.shard_plan,
        shar_stats=DS.shar_stats,
    output:
        verify=DS.verify,
    log:
        layout.log("verify", "{dataset}"),
    params:
        codes_stats=get_codes_stats,
        split=lambda wildcards: layout.set_of(wildcards.dataset)[1],
    threads: threads_of("verify")
    resources:
        mem_mb=RESOURCES.mem_mb("verify"),
        runtime=RESOURCES.runtime("verify"),
    script:
        "../workflow_scripts/verify.py"
