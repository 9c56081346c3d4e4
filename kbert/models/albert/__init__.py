"""ALBERT: factorised embeddings and one Transformer block shared by all layers (Google's `albert_*` checkpoints)."""
