"""Model backends, each behind one small interface chosen by name in config.

codecs (NeMo, Hugging Face), speaker_embedders (GE2E, NeMo), asr (NeMo ASR models), and
random_init (small randomly initialised models for tests and the demo, with outputs that depend on
their input). Frameworks are imported only when a backend is built.
"""
