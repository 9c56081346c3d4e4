"""Embedding models run: sentence-transformers folders on a kbert backbone, what they give, and how they are scored.

- `kinds`: what a model gives a text, one class per kind (`DenseOutput`; `sparse.SparseOutput`,
  `bge_m3.LexicalOutput`, `multi_vector.MultiVectorOutput`): its graph, its modules, its rows, its search.
- `embedder`: `Embedder`, encoding and prompts (`kbert embed`); `loading`: an `Embedder` read from a folder
  and written back; `pipeline`: a folder's modules as one Keras graph.
- `folders` (a sentence-transformers, PyLate or Stanford ColBERT folder's module list, read and written) and
  `modules` (each module type's files and Keras layer); `bge_m3` (its sparse and ColBERT heads).
- `sparse`, `inference_free` (SPLADE, and a weight table for queries), `multi_vector` (ColBERT's roles, query
  expansion and MaxSim), `precision` (int8, uint8 and binary vectors), `evaluation` (MTEB-style scores) and
  `ranking_metrics` (nDCG@10, MRR@10, recall@100).

Training them is `kbert.tasks` (`embedding`, `sparse_embedding`, `multi_vector_embedding`).
"""
