"""`kbert summary --style keras2`: Keras 2's text layout, as in bert4keras's tables."""

from conftest import CONFIGS, kbert_in_process

# Keras 2 (tf.keras 2.x) print_summary of a functional model: 98 columns, cells cut at
# 32/53/65, connections `name[node][tensor]` one per line, inputs as [(None, None)].
# Trailing spaces (Keras 2 padded every row to 98 columns) are stripped here.
EXPECTED_TINY_CLASSIFIER = """\
Model: "classifier"
__________________________________________________________________________________________________
Layer (type)                    Output Shape         Param #     Connected to
==================================================================================================
Input-Token (InputLayer)        [(None, None)]       0
__________________________________________________________________________________________________
Input-Segment (InputLayer)      [(None, None)]       0
__________________________________________________________________________________________________
Embedding-Token (TokenEmbedding (None, None, 32)     676096      Input-Token[0][0]
__________________________________________________________________________________________________
Embedding-Segment (Embedding)   (None, None, 32)     64          Input-Segment[0][0]
__________________________________________________________________________________________________
Embedding-Token-Segment (Masked (None, None, 32)     0           Embedding-Token[0][0]
                                                                 Embedding-Segment[0][0]
__________________________________________________________________________________________________
Embedding-Position (PositionEmb (None, None, 32)     2048        Embedding-Token-Segment[0][0]
__________________________________________________________________________________________________
Embedding-Norm (LayerNormalizat (None, None, 32)     64          Embedding-Position[0][0]
__________________________________________________________________________________________________
Embedding-Dropout (Dropout)     (None, None, 32)     0           Embedding-Norm[0][0]
__________________________________________________________________________________________________
Transformer-0-MultiHeadSelfAtte (None, None, 32)     4224        Embedding-Dropout[0][0]
                                                                 Embedding-Dropout[0][0]
                                                                 Embedding-Dropout[0][0]
__________________________________________________________________________________________________
Transformer-0-MultiHeadSelfAtte (None, None, 32)     0           Transformer-0-MultiHeadSelfAttent
__________________________________________________________________________________________________
Transformer-0-MultiHeadSelfAtte (None, None, 32)     0           Embedding-Dropout[0][0]
                                                                 Transformer-0-MultiHeadSelfAttent
__________________________________________________________________________________________________
Transformer-0-MultiHeadSelfAtte (None, None, 32)     64          Transformer-0-MultiHeadSelfAttent
__________________________________________________________________________________________________
Transformer-0-FeedForward (Feed (None, None, 32)     4192        Transformer-0-MultiHeadSelfAttent
__________________________________________________________________________________________________
Transformer-0-FeedForward-Dropo (None, None, 32)     0           Transformer-0-FeedForward[0][0]
__________________________________________________________________________________________________
Transformer-0-FeedForward-Add ( (None, None, 32)     0           Transformer-0-MultiHeadSelfAttent
                                                                 Transformer-0-FeedForward-Dropout
__________________________________________________________________________________________________
Transformer-0-FeedForward-Norm  (None, None, 32)     64          Transformer-0-FeedForward-Add[0][
__________________________________________________________________________________________________
Transformer-1-MultiHeadSelfAtte (None, None, 32)     4224        Transformer-0-FeedForward-Norm[0]
                                                                 Transformer-0-FeedForward-Norm[0]
                                                                 Transformer-0-FeedForward-Norm[0]
__________________________________________________________________________________________________
Transformer-1-MultiHeadSelfAtte (None, None, 32)     0           Transformer-1-MultiHeadSelfAttent
__________________________________________________________________________________________________
Transformer-1-MultiHeadSelfAtte (None, None, 32)     0           Transformer-0-FeedForward-Norm[0]
                                                                 Transformer-1-MultiHeadSelfAttent
__________________________________________________________________________________________________
Transformer-1-MultiHeadSelfAtte (None, None, 32)     64          Transformer-1-MultiHeadSelfAttent
__________________________________________________________________________________________________
Transformer-1-FeedForward (Feed (None, None, 32)     4192        Transformer-1-MultiHeadSelfAttent
__________________________________________________________________________________________________
Transformer-1-FeedForward-Dropo (None, None, 32)     0           Transformer-1-FeedForward[0][0]
__________________________________________________________________________________________________
Transformer-1-FeedForward-Add ( (None, None, 32)     0           Transformer-1-MultiHeadSelfAttent
                                                                 Transformer-1-FeedForward-Dropout
__________________________________________________________________________________________________
Transformer-1-FeedForward-Norm  (None, None, 32)     64          Transformer-1-FeedForward-Add[0][
__________________________________________________________________________________________________
CLS-token (TakeToken)           (None, 32)           0           Transformer-1-FeedForward-Norm[0]
__________________________________________________________________________________________________
dense_output (Dense)            (None, 2)            66          CLS-token[0][0]
==================================================================================================
Total params: 695,426
Trainable params: 695,426
Non-trainable params: 0
"""


kbert = kbert_in_process  # `kbert.cli.main` in this process: no TensorFlow start-up a call


def test_keras2_layout_of_the_tiny_classifier():
    result = kbert("summary", CONFIGS / "bert_tiny.json", "--num-labels", 2, "--style", "keras2")
    assert result.returncode == 0, result.stderr
    table = result.stdout.split("\n\n")[0].splitlines()
    rows = table[1:table.index("Total params: 695,426")]
    assert all(len(line) == 98 for line in rows), "Keras 2 pads every row to 98 columns"
    assert [line.rstrip() for line in table[:-1]] == EXPECTED_TINY_CLASSIFIER.splitlines()
    assert table[-1] == "_" * 98


def test_keras2_layout_of_the_default_model():
    result = kbert("summary", "--style", "keras2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    end = lines.index("Total params: 101,678,594")
    assert lines[end:end + 3] == ["Total params: 101,678,594", "Trainable params: 101,678,594",
                                  "Non-trainable params: 0"]
    # The MLM-free classifier: the token embedding has one call, so its shape is shown.
    assert lines[8].rstrip() == "Embedding-Token (TokenEmbedding (None, None, 768)    16226304    Input-Token[0][0]"
    assert "✓ all 53 rows agree with the built model (total 101,678,594)" in result.stdout
