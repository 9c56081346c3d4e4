"""MPNet (`model="mpnet"`): RoBERTa's positions and BERT's blocks, with a relative position bias shared by every layer."""
