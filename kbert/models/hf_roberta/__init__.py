"""RoBERTa and XLM-RoBERTa as Hugging Face lays them out (`model="hf_roberta"`): positions after the padding id."""
