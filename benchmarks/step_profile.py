"""Where a BERT classifier's training step spends its time on JAX: kbert against keras-hub, per precision.

    python -m benchmarks.step_profile [--precisions tf32 bf16] [--batch 32] [--length 128] [--hlo DIR]

`benchmarks.backends --task train` times whole optimizer steps; when one
library's step is slower, this says which part: the forward pass alone
(`stateless_call`, inference), the forward and backward passes (`jax.grad` of
the loss, dropout on), and the whole `train_on_batch` step (the optimizer's
update and Keras's train function around them). It also reads the compiled
forward-and-backward program (XLA's optimised HLO): its matrix products by
result type, its fusions, XLA's own count of FLOPs and bytes accessed, and
writes it to `--hlo DIR` to compare the two libraries' programs line by line.
All models run in one process (one backend), in alternating rounds.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics

os.environ.setdefault("KERAS_BACKEND", "jax")


def _classifier(library: str, config: dict, batch: int, length: int):
    """A two-label BERT-base classifier as each library's users build it (as `benchmarks.backends`'s train task
    builds them), its inputs, labels and loss."""
    import keras

    from benchmarks.backends import _keras_hub_backbone, _keras_hub_inputs, _labels, _token_ids

    labels = _labels(batch)
    if library == "kbert":
        from kbert import build_transformer_model
        from kbert.builder import build_classifier

        tokens = _token_ids(config["vocab_size"], batch, length)
        model = build_classifier(build_transformer_model(config), 2)
        return model, [tokens, tokens * 0], labels, keras.losses.SparseCategoricalCrossentropy()
    import keras_hub

    model = keras_hub.models.BertTextClassifier(_keras_hub_backbone(config), num_classes=2, preprocessor=None)
    return (model, _keras_hub_inputs(config, batch, length), labels,
            keras.losses.SparseCategoricalCrossentropy(from_logits=True))


def _program_summary(compiled) -> dict:
    """Matrix products by result type, fusions, and XLA's FLOPs and bytes, of a compiled JAX program."""
    text = compiled.as_text()
    products = collections.Counter()
    for line in text.splitlines():
        # a GPU's matrix products are cuBLAS custom calls; a CPU's are dot instructions
        if "custom-call" in line and "gemm" in line or re.search(r"\bdot\(", line):
            result = re.search(r"=\s*\(?(\w+)\[", line)  # a gemm's result: (output, workspace)
            products[result.group(1) if result else "?"] += 1
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return {"products": dict(products), "fusions": len(re.findall(r"^\s*\S+ = \S+ fusion\(", text, re.M)),
            "gflops": cost.get("flops", 0) / 1e9, "gbytes": cost.get("bytes accessed", 0) / 1e9, "text": text}


def _parts(library: str, precision: str, config: dict, batch: int, length: int):
    """The three timed callables of one classifier, and its forward-and-backward program's summary."""
    import jax
    import keras

    keras.mixed_precision.set_global_policy("mixed_bfloat16" if precision == "bf16" else "float32")
    jax.config.update("jax_default_matmul_precision", "float32" if precision == "fp32" else "tensorfloat32")
    model, inputs, labels, loss_fn = _classifier(library, config, batch, length)
    model.compile(optimizer=keras.optimizers.AdamW(learning_rate=2e-5), loss=loss_fn)

    def state():  # read at each call: train_on_batch donates the variables' buffers and replaces them
        return [v.value for v in model.trainable_variables], [v.value for v in model.non_trainable_variables]

    def forward(trainable, fixed, inputs):
        return model.stateless_call(trainable, fixed, inputs, training=False)[0]

    def loss(trainable, fixed, inputs, labels):
        return loss_fn(labels, model.stateless_call(trainable, fixed, inputs, training=True)[0])

    forward, gradients = jax.jit(forward), jax.jit(jax.grad(loss))
    program = _program_summary(gradients.lower(*state(), inputs, labels).compile())
    keras.mixed_precision.set_global_policy("float32")
    timed = {"forward": lambda: jax.block_until_ready(forward(*state(), inputs)),
             "forward+backward": lambda: jax.block_until_ready(gradients(*state(), inputs, labels)),
             "train_on_batch": lambda: model.train_on_batch(inputs, labels)}
    for call in timed.values():  # compile outside the timing
        call()
    return timed, program


def main(argv=None) -> None:
    from benchmarks.alternating import alternate
    from kbert.models.config import bundled_config_path, read_json_object

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--precisions", nargs="+", default=["tf32", "bf16"], choices=["fp32", "tf32", "bf16"])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--config", default="bert_base_chinese")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--hlo", help="write each forward-and-backward program's optimised HLO here")
    args = parser.parse_args(argv)
    config = read_json_object(bundled_config_path(args.config))
    engines, programs = {}, {}
    for precision in args.precisions:
        for library in ("kbert", "keras-hub"):
            timed, programs[f"{library} {precision}"] = _parts(library, precision, config, args.batch, args.length)
            engines.update({(library, precision, part): call for part, call in timed.items()})
    seconds = alternate(engines, args.rounds, args.calls)
    print(f"{args.config} classifier, {args.batch} x {args.length} tokens; {args.rounds} alternating rounds of "
          f"{args.calls} calls; milliseconds per call, medians")
    print(f"{'library precision':22} {'forward':>9} {'fwd+bwd':>9} {'step':>9}  compiled forward+backward")
    for name, program in programs.items():
        library, precision = name.split()
        times = [1e3 * statistics.median(seconds[(library, precision, part)])
                 for part in ("forward", "forward+backward", "train_on_batch")]
        print(f"{name:22} {times[0]:9.2f} {times[1]:9.2f} {times[2]:9.2f}  products {program['products']}, "
              f"{program['fusions']} fusions, {program['gflops']:.0f} GFLOP, {program['gbytes']:.2f} GB accessed")
        if args.hlo:
            os.makedirs(args.hlo, exist_ok=True)
            with open(os.path.join(args.hlo, name.replace(" ", "-") + ".hlo.txt"), "w", encoding="utf-8") as out:
                out.write(program["text"])


if __name__ == "__main__":
    main()
