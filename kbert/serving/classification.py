"""A classifier behind `/v1/predict`: its batches run token ids, as an embedding model's and a reranker's do.

Each request's texts (and pairs) are tokenized once, on a worker thread, so that the event loop stays
free, the tokens are counted for the batch's budget (`--max-batch-tokens`) and the metrics, and the
model thread runs the model alone. Texts longer than the model takes are cut, as `kbert predict` cuts
them.
"""

from typing import List, Optional

import numpy as np

from kbert.serving.batcher import Batcher, TokenizedService


class ClassifyService(TokenizedService):
    """A `TrainedClassifier` behind a server's batcher: texts (and text pairs) in, label rows out.

    Args:
        model: a `kbert.tasks.classification.TrainedClassifier` (its model Keras's or an ONNX file's).
        batch_size: texts in one model call at most (the server's `--max-batch`).
    """

    def __call__(self, encoded, pairs=None) -> np.ndarray:
        """The batcher's model call: class probabilities of tokenized texts."""
        return self.model.probabilities_of_tokens(encoded, self.batch_size)

    async def labelled(self, batcher: Batcher, texts: List[str], pairs: Optional[List[Optional[str]]]) -> List[dict]:
        """`{"text", "label", "probability"}` for each text, as `kbert predict` gives them."""
        self.model.check_texts(texts, pairs)
        probabilities, _ = await self.run(batcher, texts, pairs, truncate=True)
        return self.model.label_rows(texts, np.asarray(probabilities))
