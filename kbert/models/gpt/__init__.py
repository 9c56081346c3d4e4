"""The decoder-only language models: GPT (`model="gpt"`), GPT-2 (`"gpt2"`) and GPT2-ML (`"gpt2_ml"`)."""
