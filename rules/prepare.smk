rule recipe:
    output:
        recordings=DS.recipe_recordings,
        supervisions=DS.recipe_supervisions,
        stats=DS.recipe_stats,
    log:
        layout.log("recipe", "{dataset}"),
    benchmark:
        layout.benchmark("recipe", "{dataset}")
    params:
        settings=get_recipe_settings,
    threads: threads_of("prepare")
    resources:
        mem_mb=RESOURCES.mem_mb("recipe"),
        runtime=RESOURCES.runtime("recipe"),
    script:
        "../workflow_scripts/recipe.py"


rule prepare:
    input:
        manifest=get_manifest,
    output:
        prepared=DS.prepared,
        rejected=directory(DS.prepare_rejected),
        stats=DS.prepare_stats,
    log:
        layout.log("prepare", "{dataset}"),
    benchmark:
        layout.benchmark("prepare", "{dataset}")
    params:
        settings=get_prepare_settings,
        manifest_version=get_manifest_version,
    threads: threads_of("prepare")
    resources:
        mem_mb=RESOURCES.mem_mb("prepare"),
        runtime=RESOURCES.runtime("prepare"),
    script:
        "../workflow_scripts/prepare.py"
