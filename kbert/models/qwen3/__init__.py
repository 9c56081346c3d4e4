"""Qwen3 (`model_type` qwen3): Qwen2's blocks with an RMS norm on each head's queries and keys (Qwen3-Embedding,
Qwen3-Reranker)."""
