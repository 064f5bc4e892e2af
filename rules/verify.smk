rule verify:
    input:
        codes_stats=lambda wildcards: list(get_codes_stats(wildcards).values()),
        catalog=DS.catalog,
        plan=DS.shard_plan,
        shar_stats=DS.shar_stats,
    output:
        verify=DS.verify,
    log:
        layout.log("verify", "{dataset}"),
    params:
        codes_stats=get_codes_stats,
    threads: threads_of("verify")
    resources:
        mem_mb=2000,
    script:
        "../workflow_scripts/verify.py"
