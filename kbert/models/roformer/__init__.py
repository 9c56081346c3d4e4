"""RoFormer: BERT with rotary position embeddings (ZhuiyiTechnology's `chinese_roformer*` checkpoints)."""
