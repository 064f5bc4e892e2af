rule catalog:
    input:
        fragments=get_shar_job_catalogs,
        codes_stats=lambda wildcards: list(get_codes_stats(wildcards).values()),
        plan=DS.shard_plan,
    output:
        catalog=DS.catalog,
    log:
        "logs/catalog/{dataset}.log",
    benchmark:
        "logs/catalog/{dataset}.benchmark.tsv"
    params:
        codes_stats=get_codes_stats,
        tokenizer=config["training"]["tokenizer"],
    resources:
        mem_mb=4000,
    script:
        "../workflow_scripts/catalog.py"


rule dataset_card:
    input:
        catalog=DS.catalog,
        buckets=DS.buckets,
        verify=DS.verify,
    output:
        card=report(DS.dataset_card, caption="report/dataset_card.rst", category="Datasets"),
    log:
        "logs/dataset_card/{dataset}.log",
    resources:
        mem_mb=2000,
    script:
        "../workflow_scripts/dataset_card.py"
