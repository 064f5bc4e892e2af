"""Model backends, each behind one small interface chosen by name in config.

codecs (NeMo, Hugging Face), speaker_embedders (GE2E, NeMo), asr (NeMo ASR models), the quality
stage's dnsmos (DNSMOS P.835: onnxruntime on a CPU, the same graph in torch on a GPU) and vad (Silero
VAD, batched), and random_init (small randomly initialised models for tests and the demo, with
outputs that depend on their input). Frameworks are imported only when a backend is built.
"""
