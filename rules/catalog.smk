rule catalog:
    input:
        shar_jobs=get_job_records("shar"),
        held_out_shar_jobs=get_held_out_job_records,
        codes_stats=lambda wildcards: list(get_codes_stats(wildcards).values()),
        plan=DS.shard_plan,
    output:
        catalog=DS.catalog,
    log:
        layout.log("catalog", "{dataset}"),
    benchmark:
        layout.benchmark("catalog", "{dataset}")
    params:
        codes_stats=get_codes_stats,
        tokenizer=config["training"]["tokenizer"],
        held_out=get_held_out_plans,
    resources:
        mem_mb=RESOURCES.mem_mb("catalog"),
        runtime=RESOURCES.runtime("catalog"),
    script:
        "../workflow_scripts/catalog.py"


rule dataset_card:
    input:
        unpack(get_card_inputs),
    output:
        card=report(DS.dataset_card, caption="report/dataset_card.rst", category="Datasets"),
    log:
        layout.log("dataset_card", "{dataset}"),
    resources:
        mem_mb=RESOURCES.mem_mb("dataset_card"),
        runtime=RESOURCES.runtime("dataset_card"),
    script:
        "../workflow_scripts/dataset_card.py"
