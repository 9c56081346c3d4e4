"""DistilBERT (`model="distilbert"`): BERT's blocks without segments or a pooler, under Hugging Face's names."""
