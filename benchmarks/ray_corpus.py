"""A corpus embedded on a local Ray cluster against one process: `kbert embed --ray`'s throughput with one actor and
with `--workers` actors (one CPU each), against `Embedder.encode` in this process on every core.

    python -m benchmarks.ray_corpus --model PATH/TO/all-MiniLM-L6-v2 [--count 2000] [--rounds 3] [--workers 2]

Real reviews (the train split's first `--count`), written as JSON Lines. Each engine runs the whole corpus and a
64-text one in every round, in turn (alternating rounds); a Ray run includes starting its actors and loading the
model in each, so the table gives the end-to-end rate and the marginal one, (count - 64) / (t(count) - t(64)): what a
corpus far larger than this one gets. The one-process engine's model is loaded once, before the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from benchmarks.alternating import cpu_name, describe, median_ratio
from benchmarks.embedding_quality import read_reviews

SMALL = 64


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)

    from kbert.embeddings.embedder import Embedder
    from kbert.serving.corpus_on_ray import CorpusJob, embed_corpus
    from kbert.serving.ray_cluster import start_ray

    texts = [text for text, _ in read_reviews("train")[:args.count]]
    scratch = tempfile.mkdtemp()
    corpora = {}
    for size in (SMALL, len(texts)):
        corpora[size] = os.path.join(scratch, f"corpus-{size}.jsonl")
        with open(corpora[size], "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps({"id": index, "text": text}, ensure_ascii=False) + "\n"
                              for index, text in enumerate(texts[:size]))
    embedder = Embedder.load(args.model, dtype="float32")
    embedder.encode(texts[:SMALL])  # warmed up: its graph compiled
    start_ray(None, spare_cpus=1)
    runs = iter(range(10 ** 6))

    def on_ray(workers: int, size: int) -> None:
        job = CorpusJob(model=os.path.abspath(args.model), source=corpora[size], dtype="float32",
                        output=os.path.join(scratch, f"out-{next(runs)}"))
        embed_corpus(job, workers=workers, worker_cpus=1)

    engines = {"one process (Embedder.encode, every core)": lambda size: embedder.encode(texts[:size]),
               "Ray, 1 actor of 1 CPU": lambda size: on_ray(1, size),
               f"Ray, {args.workers} actors of 1 CPU": lambda size: on_ray(args.workers, size)}
    seconds = {name: {SMALL: [], len(texts): []} for name in engines}
    for _ in range(args.rounds):
        for name, engine in engines.items():
            for size in (SMALL, len(texts)):
                start = time.perf_counter()
                engine(size)
                seconds[name][size].append(time.perf_counter() - start)

    count = len(texts)
    marginal = {name: [(count - SMALL) / (big - small) for big, small in zip(timed[count], timed[SMALL])]
                for name, timed in seconds.items()}
    base = next(iter(engines))
    one_actor = list(engines)[1]
    print(f"{cpu_name()}; {count} reviews, all-MiniLM-L6-v2, float32, {args.rounds} alternating rounds")
    print("| engine | texts/s end to end | texts/s marginal | marginal / one process | marginal / 1 actor |")
    print("|---|---:|---:|---:|---:|")
    for name in engines:
        end_to_end = statistics.median(count / value for value in seconds[name][count])
        print(f"| {name} | {end_to_end:.0f} | {statistics.median(marginal[name]):.0f} | "
              f"{describe(median_ratio(marginal[name], marginal[base]))} | "
              f"{describe(median_ratio(marginal[name], marginal[one_actor]))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
