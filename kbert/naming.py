"""The bert4keras layer names, defined once.

The builder names its layers with these, the analytic parameter table lists
them, and the weight table maps them to checkpoint variables. This module is
pure Python so that `kbert params` never imports TensorFlow.
"""

INPUT_TOKEN = "Input-Token"
INPUT_SEGMENT = "Input-Segment"
EMBEDDING_TOKEN = "Embedding-Token"
EMBEDDING_SEGMENT = "Embedding-Segment"
EMBEDDING_TOKEN_SEGMENT = "Embedding-Token-Segment"
EMBEDDING_POSITION = "Embedding-Position"
EMBEDDING_NORM = "Embedding-Norm"
EMBEDDING_DROPOUT = "Embedding-Dropout"

POOLER = "Pooler"
POOLER_DENSE = "Pooler-Dense"
NSP_PROBA = "NSP-Proba"
MLM_DENSE = "MLM-Dense"
MLM_NORM = "MLM-Norm"
MLM_BIAS = "MLM-Bias"
MLM_ACTIVATION = "MLM-Activation"

# The classifier head of the mission's documents (and of many bert4keras
# tutorials): the [CLS] vector, then a softmax Dense.
CLS_TOKEN = "CLS-token"
CLASSIFIER_DENSE = "dense_output"

ATTENTION = "MultiHeadSelfAttention"
FEED_FORWARD = "FeedForward"


def block(index: int, sublayer: str, suffix: str = "") -> str:
    """Name of a layer in Transformer block `index`.

    `block(0, ATTENTION)` is "Transformer-0-MultiHeadSelfAttention" and
    `block(0, ATTENTION, "Norm")` is "Transformer-0-MultiHeadSelfAttention-Norm".
    """
    name = f"Transformer-{index}-{sublayer}"
    return f"{name}-{suffix}" if suffix else name
