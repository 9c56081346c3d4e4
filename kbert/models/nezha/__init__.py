"""NEZHA: BERT with functional relative positions instead of absolute ones (Huawei's `nezha-*` checkpoints)."""
