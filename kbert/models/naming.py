"""The bert4keras layer names, defined once.

The builder names its layers with these, the analytic parameter table lists
them, and the weight table maps them to checkpoint variables. This module is
pure Python so that `kbert params` never imports TensorFlow.
"""

import re
from typing import Optional, Tuple

INPUT_TOKEN = "Input-Token"
INPUT_SEGMENT = "Input-Segment"
INPUT_MASKED_POSITIONS = "Input-Masked-Positions"  # pre-training: where the MLM head predicts
INPUT_POSITION = "Input-Position"  # packed pre-training: each token's position within its document
EMBEDDING_TOKEN = "Embedding-Token"
EMBEDDING_SEGMENT = "Embedding-Segment"
EMBEDDING_TOKEN_SEGMENT = "Embedding-Token-Segment"
EMBEDDING_POSITION = "Embedding-Position"
EMBEDDING_NORM = "Embedding-Norm"
EMBEDDING_DROPOUT = "Embedding-Dropout"
EMBEDDING_MAPPING = "Embedding-Mapping"  # E -> H when embedding_size differs (ALBERT, ELECTRA)
EMBEDDING_RELATIVE_POSITION = "Embedding-Relative-Position"  # NEZHA
EMBEDDING_ROTARY_POSITION = "Embedding-Rotary-Position"  # RoFormer
ATTENTION_LM_MASK = "Attention-LM-Mask"  # application="lm"
ATTENTION_UNILM_MASK = "Attention-UniLM-Mask"  # application="unilm"
ATTENTION_PACKED_MASK = "Attention-Packed-Mask"  # packed pre-training: attention within a document only

POOLER = "Pooler"
POOLER_DENSE = "Pooler-Dense"
NSP_PROBA = "NSP-Proba"
MLM_DENSE = "MLM-Dense"
MLM_NORM = "MLM-Norm"
MLM_BIAS = "MLM-Bias"
MLM_ACTIVATION = "MLM-Activation"
MLM_POSITIONS = "MLM-Positions"  # pre-training: the hidden states at the masked positions
DISCRIMINATOR_DENSE = "Discriminator-Dense"  # ELECTRA
DISCRIMINATOR_PREDICTION = "Discriminator-Prediction"
# RoFormer-v2's MLM head: the tied embedding, no dense, norm or bias.
OUTPUT_MAPPING = "Output-Mapping"
OUTPUT_MLM_DROPOUT = "Output-MLM-Dropout"
OUTPUT_MLM_ACTIVATION = "Output-MLM-Activation"
# The GPT families' language-model output (the tied embedding); GPT-2's final norm.
LM_ACTIVATION = "LM-Activation"
OUTPUT_NORM = "Output-Norm"
OUTPUT_DROPOUT = "Output-Dropout"

# The classifier head of the mission's documents (and of many bert4keras
# tutorials): the [CLS] vector, then a softmax Dense.
CLS_TOKEN = "CLS-token"
CLASSIFIER_DENSE = "dense_output"
CLASSIFIER_HIDDEN = "Classifier-Hidden"  # RoBERTa's sequence-classification head: its dense before the output
CLASSIFIER_NORM = "Classifier-Norm"  # ModernBERT's sequence-classification head: its norm after that dense
# A tagger's heads (`build_token_classifier`): emissions then a CRF, or span scores.
EMISSIONS_DENSE = "dense_emissions"
CRF = "CRF"
GLOBAL_POINTER = "global_pointer"

ATTENTION = "MultiHeadSelfAttention"
FEED_FORWARD = "FeedForward"


_BLOCK = re.compile(r"Transformer-(?:(\d+)-)?(MultiHeadSelfAttention|FeedForward)(?:-(Norm))?")


def block(index: Optional[int], sublayer: str, suffix: str = "") -> str:
    """Name of a layer in Transformer block `index` (None: ALBERT's one shared block).

    `block(0, ATTENTION)` is "Transformer-0-MultiHeadSelfAttention",
    `block(0, ATTENTION, "Norm")` is "Transformer-0-MultiHeadSelfAttention-Norm"
    and `block(None, FEED_FORWARD)` is "Transformer-FeedForward".
    """
    name = f"Transformer-{sublayer}" if index is None else f"Transformer-{index}-{sublayer}"
    return f"{name}-{suffix}" if suffix else name


def parse_block(name: str) -> Optional[Tuple[Optional[int], str, bool]]:
    """`(index, sublayer, is_norm)` of a block's attention, feed-forward or norm layer; None otherwise.

    >>> parse_block("Transformer-3-FeedForward-Norm"), parse_block("Transformer-MultiHeadSelfAttention")
    ((3, 'FeedForward', True), (None, 'MultiHeadSelfAttention', False))
    """
    match = _BLOCK.fullmatch(name)
    if not match:
        return None
    index = None if match.group(1) is None else int(match.group(1))
    return index, match.group(2), bool(match.group(3))


def is_numbered_block(name: str) -> bool:
    """Whether a layer belongs to a numbered block (`Transformer-3-…`, T5's `Decoder-Transformer-3-…`).

    >>> is_numbered_block("Encoder-Transformer-3-FeedForward-Norm"), is_numbered_block("Transformer-FeedForward")
    (True, False)
    """
    return re.search(r"(^|-)Transformer-\d+-", name) is not None
