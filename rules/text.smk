# The normalizer's grammars of a language, built once into sharflow's cache (outside results/): the
# text jobs of every dataset in that language wait for this one job instead of each building them.
rule text_normalizer:
    output:
        normalizer=layout.text_normalizer("{language}"),
    log:
        layout.log("text_normalizer", "{language}"),
    benchmark:
        layout.benchmark("text_normalizer", "{language}")
    params:
        key=lambda wildcards: normalizer_key(wildcards.language)[0],
        cache_dir=TEXT_CACHE,
    resources:
        mem_mb=RESOURCES.mem_mb("text_normalizer"),
        runtime=RESOURCES.runtime("text_normalizer"),
    script:
        "../workflow_scripts/text_normalizer.py"


rule text:
    input:
        records=DS.prepared,
        records_stats=DS.prepare_stats,
        normalizers=get_text_normalizers,
    output:
        records=DS.text_records,
        rejected=directory(DS.text_rejected),
        stats=DS.text_stats,
    log:
        layout.log("text", "{dataset}"),
    benchmark:
        layout.benchmark("text", "{dataset}")
    params:
        settings=get_text_settings,
        tokenizer=config["training"]["tokenizer"],
        cache_dir=TEXT_CACHE,
        # english_phoneme's dictionary (made here from cmudict: a new one measures the texts again)
        phoneme_dict=PHONEME_DICT_KEY,
    threads: threads_of("text")
    resources:
        mem_mb=RESOURCES.mem_mb("text"),
        runtime=RESOURCES.runtime("text"),
    script:
        "../workflow_scripts/text.py"
