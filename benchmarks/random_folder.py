"""A sentence-transformers folder of a bundled config's shape with random weights, for `benchmarks.embedding`.

    python -m benchmarks.random_folder --config modernbert_base --out /tmp/modernbert_st

The weights are kbert's draw (seed 0); the tokenizer is a byte-level BPE `tokenizer.json` ([PAD] 0, [CLS] A
[SEP]) of 20,000 pieces trained on the sentiment corpus's training texts (`../shared/data/sentiment`), which
the benchmark's test texts are not; mean pooling, normalised, 512 tokens at most. Prints the test texts'
token counts (median, 90th percentile, largest).

    python -m benchmarks.random_folder --config distilbert_base_uncased --sparse --out /tmp/splade_st

`--sparse` writes a SPLADE sparse encoder instead (the masked-LM head, max pooling of log(1 + ReLU)), its
head's bias set to -1.75 so that a text keeps a few hundred vocabulary entries, as a trained SPLADE's do
(random logits would keep half the vocabulary).

    python -m benchmarks.random_folder --config bert_base_uncased --multi-vector --out /tmp/colbert_st

`--multi-vector` writes a ColBERT multi-vector encoder instead, in PyLate's default shape: each token's vector
projected to 128 values (no bias) and normalised, documents cut at 180 tokens without their punctuation,
queries expanded with [MASK] to 32 tokens that the query does not attend to.

    python -m benchmarks.random_folder --config qwen3_embedding_0_6b --out /tmp/qwen3_st

A decoder's config (Llama, Mistral, Qwen2, Qwen3) gets Qwen3-Embedding's framing instead: one special token,
`<|endoftext|>`, that ends every text and pads (on the left, as Qwen3-Embedding's tokenizer_config.json says),
last-token pooling, normalised, and its query prompt (`Instruct: ...\nQuery:`).

    python -m benchmarks.random_folder --config embeddinggemma_300m --out /tmp/embeddinggemma_st

Gemma 3's config gets EmbeddingGemma's framing: `<bos>` before and `<eos>` after each text, `<pad>` (id 0) on
the right, mean pooling, then two Dense projections without bias (768 → 3072 → 768), normalised, 2,048 tokens at
most, and its prompts (`task: search result | query: `, `title: none | text: `); written from memory of its model
card, not checked against its files.

    python -m benchmarks.random_folder --config qwen3_reranker_0_6b --reranker --out /tmp/qwen3_reranker

`--reranker` writes a decoder as Qwen3-Reranker's sentence-transformers 6 CrossEncoder instead: its LM head (tied),
a text-generation Transformer and a LogitScore (two fixed token ids as "yes" and "no"), Qwen's chat markers as
special tokens, and a chat template in Qwen3-Reranker's shape (its judging system line, `<Instruct>`, `<Query>`,
`<Document>`, then the assistant's empty thinking; written from memory of its model card, not checked), Sigmoid scores.
"""

from __future__ import annotations

import argparse
import json
import os
import string
import sys

from benchmarks.alternating import REPOSITORY

DECODERS = ("llama", "mistral", "qwen2", "qwen3")
END = "<|endoftext|>"  # Qwen's: the token that ends every text, and pads
QUERY_PROMPT = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"
MARKERS = ["<|im_start|>", "<|im_end|>"]
RERANKER_TEMPLATE = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    'provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n<Instruct>: '
    "{% set system = messages | selectattr('role', 'eq', 'system') | list %}"
    "{{ system[0]['content'] if system else 'Given a web search query, retrieve relevant passages that answer the "
    "query' }}\n<Query>: {{ (messages | selectattr('role', 'eq', 'query') | first)['content'] }}\n<Document>: "
    "{{ (messages | selectattr('role', 'eq', 'document') | first)['content'] }}<|im_end|>\n<|im_start|>assistant\n"
    "<think>\n\n</think>\n\n")
GEMMA = "gemma3_text"
GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>"]  # ids 0, 1, 2, as Gemma's
GEMMA_PROMPTS = {"query": "task: search result | query: ", "document": "title: none | text: "}
GEMMA_DENSE = 3072  # EmbeddingGemma's projection out and back
SENTIMENT = os.path.join(os.path.dirname(REPOSITORY), "shared", "data", "sentiment")


def texts(name: str) -> list:
    with open(os.path.join(SENTIMENT, name), encoding="utf-8") as handle:
        return [line.split("\t")[0] for line in handle]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="modernbert_base", help="a bundled config (default: modernbert_base)")
    parser.add_argument("--out", required=True, help="the folder to write (it must not exist)")
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--sparse", action="store_true", help="a SPLADE sparse encoder (SparseEncoder folder)")
    kind.add_argument("--multi-vector", action="store_true",
                      help="a ColBERT multi-vector encoder (MultiVectorEncoder folder)")
    kind.add_argument("--reranker", action="store_true", help="a decoder's CrossEncoder (Qwen3-Reranker's shape)")
    args = parser.parse_args(argv)
    import keras
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    from kbert import build_transformer_model, save_hf_weights
    from kbert.embeddings.folders import write_modules
    from kbert.embeddings.multi_vector import MultiVectorOutput, QueryExpansion
    from kbert.embeddings.sparse import SparseOutput
    from kbert.embeddings.modules import Dense
    from kbert.models.config import bundled_config_path

    os.makedirs(args.out)
    with open(bundled_config_path(args.config), encoding="utf-8") as handle:
        config = json.load(handle)
    decoder, gemma = config.get("model_type") in DECODERS, config.get("model_type") == GEMMA
    specials = [END, *MARKERS] if decoder else GEMMA_SPECIALS if gemma else ["[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                                                                "[MASK]"]
    tokenizer = Tokenizer(models.BPE(unk_token=None if decoder or gemma else "[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    # a reranker's tokenizer knows its template's English words, as Qwen's does (not piece by piece)
    template_words = [RERANKER_TEMPLATE] * 100 if args.reranker else []
    tokenizer.train_from_iterator(texts("sentiment.train.data") + template_words, trainers.BpeTrainer(
        vocab_size=20000, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {END}", pair=f"$A {END} $B {END}", special_tokens=[(END, 0)]) if decoder else \
        processors.TemplateProcessing(single="<bos> $A <eos>", pair="<bos> $A <eos> $B <eos>",
                                      special_tokens=[("<bos>", 2), ("<eos>", 1)]) if gemma else \
        processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
                                      special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tokenizer.decoder = decoders.ByteLevel()
    config = {**config, "pad_token_id": 0}
    keras.utils.set_random_seed(0)
    bert = build_transformer_model(config, with_mlm=args.sparse or args.reranker)
    if args.sparse:
        bias = bert.get_layer("MLM-Bias")
        bias.set_weights([bias.get_weights()[0] - 1.75])
    save_hf_weights(bert, args.out)
    tokenizer.save(os.path.join(args.out, "tokenizer.json"))
    settings = ({"pad_token": END, "eos_token": END, "padding_side": "left"} if decoder else
                {"pad_token": "<pad>", "eos_token": "<eos>", "bos_token": "<bos>", "padding_side": "right"} if gemma
                else {"pad_token": "[PAD]", "cls_token": "[CLS]", "sep_token": "[SEP]", "unk_token": "[UNK]",
                 "mask_token": "[MASK]"})
    with open(os.path.join(args.out, "tokenizer_config.json"), "w", encoding="utf-8") as handle:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", **settings,
                   "model_input_names": ["input_ids", "attention_mask"]}, handle)
    width = config.get("hidden_size", config.get("dim"))
    if args.reranker:
        write_reranker(args.out)
    elif decoder:
        write_modules(args.out, "lasttoken", width, [], True, 512, prompts={"query": QUERY_PROMPT, "document": ""})
    elif gemma:
        import numpy as np

        rng = np.random.default_rng(0)
        out, back = (rng.normal(0, width ** -0.5, (width, GEMMA_DENSE)).astype("float32"),
                     rng.normal(0, GEMMA_DENSE ** -0.5, (GEMMA_DENSE, width)).astype("float32"))
        write_modules(args.out, "mean", width, [Dense([out]), Dense([back])], True, 2048, prompts=GEMMA_PROMPTS)
    elif args.sparse:
        write_modules(args.out, SparseOutput(), config["vocab_size"], [], False, 512)
    elif args.multi_vector:
        import numpy as np

        projection = np.random.default_rng(0).normal(0, width ** -0.5, (width, 128)).astype("float32")
        spec = MultiVectorOutput(document_length=180, expansion=QueryExpansion("fixed", 32),
                               skiplist_words=tuple(string.punctuation))
        write_modules(args.out, spec, width, [Dense([projection])], True, 512)
    else:
        write_modules(args.out, "mean", width, [], True, 512)
    lengths = sorted(len(tokenizer.encode(text).ids) for text in texts("sentiment.test.data"))
    print(f"{args.out}: the test texts' tokens: median {lengths[len(lengths) // 2]}, 90th percentile "
          f"{lengths[int(0.9 * len(lengths))]}, largest {lengths[-1]}")
    return 0


def write_reranker(out: str) -> None:
    """The files that make a causal LM's folder a sentence-transformers 6 CrossEncoder (as CrossEncoder.save writes
    them): its chat template, the text-generation Transformer's settings, a LogitScore of ids 100 ("yes") and 101
    ("no"), the CrossEncoder's settings (Sigmoid scores)."""
    def write(path, value):
        os.makedirs(os.path.dirname(os.path.join(out, path)), exist_ok=True)
        with open(os.path.join(out, path), "w", encoding="utf-8") as handle:
            handle.write(value if isinstance(value, str) else json.dumps(value, indent=2))

    write("chat_template.jinja", RERANKER_TEMPLATE)
    write("sentence_bert_config.json", {"transformer_task": "text-generation", "module_output_name": "causal_logits",
                                        "modality_config": {"text": {"method": "forward", "method_output_name": "logits"},
                                                            "message": {"method": "forward", "method_output_name":
                                                                        "logits", "format": "flat"}}})
    write("modules.json", [{"idx": 0, "name": "0", "path": "",
                            "type": "sentence_transformers.base.modules.transformer.Transformer"},
                           {"idx": 1, "name": "1", "path": "1_LogitScore",
                            "type": "sentence_transformers.cross_encoder.modules.logit_score.LogitScore"}])
    write("1_LogitScore/config.json", {"true_token_id": 100, "false_token_id": 101, "module_input_name": "causal_logits"})
    write("config_sentence_transformers.json", {"model_type": "CrossEncoder", "prompts": {}, "default_prompt_name": None,
                                                "activation_fn": "torch.nn.modules.activation.Sigmoid"})


if __name__ == "__main__":
    sys.exit(main())
