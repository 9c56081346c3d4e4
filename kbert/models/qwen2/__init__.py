"""Qwen2 (`model_type` qwen2): Llama's blocks with biased query, key and value projections (gte-Qwen2)."""
