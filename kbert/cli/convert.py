"""`kbert convert`: Hugging Face safetensors to a Google checkpoint and back."""

from __future__ import annotations

from kbert.cli.arguments import checkpoint_argument, family_argument, fetch_checkpoint_argument


def add_commands(command) -> None:
    """Adds `convert` through `command(name, help)`, which returns a sub-parser."""
    convert = command("convert", "convert Hugging Face safetensors <-> Google checkpoint")
    checkpoint_argument(convert, "the source", positional=True)
    convert.add_argument("output", metavar="OUT", help="output directory (new, or empty)")
    convert.add_argument("--config", help="the source's config (default: the one beside CKPT)")
    convert.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    convert.add_argument("--max-shard-size", metavar="SIZE",
                         help="to safetensors: shards of at most SIZE (5GB, 500MB, 2GiB or bytes) and "
                              "model.safetensors.index.json, as transformers writes large models")
    family_argument(convert, "default: the config's model_type, else bert")
    convert.set_defaults(run=run_convert)


def run_convert(args) -> int:
    from kbert.builder.convert import convert

    fetch_checkpoint_argument(args)
    from kbert.checkpoints.hf import parse_size

    shard_size = parse_size(args.max_shard_size) if args.max_shard_size else None
    result = convert(args.checkpoint, args.output, config_path=args.config, overwrite=args.overwrite,
                     model=args.model, max_shard_size=shard_size)
    print(f"{result['source']} -> {result['weights']}")
    print(f"  {result['variables']} variables, {result['params']:,} parameters; config {result['config']}")
    return 0
