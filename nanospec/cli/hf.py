"""`nanospec export-hf` and `nanospec models pull`: Hugging Face GPT-2 folders out and in.

The folders themselves are nanospec/hf/'s; `--target` and `--draft`, which take a folder on
the other commands, are cli/args.py's `add_model_flags`.
"""


def add_export_hf(sub) -> None:
    """`nanospec export-hf`'s arguments (hf/export.py)."""
    x = sub.add_parser(
        "export-hf",
        help="write a shipped model as a Hugging Face GPT-2 folder that transformers loads",
    )
    x.add_argument("--model", choices=["target", "draft"], default="target")
    x.add_argument("--out", required=True, metavar="FOLDER", help="a new or empty folder")
    x.set_defaults(func=cmd_export_hf)


def add_models(sub) -> None:
    """`nanospec models pull NAME` (hf/pull.py): the one command that reaches the network."""
    m = sub.add_parser("models", help="fetch a GPT-2-family model folder from the Hugging Face hub")
    m.add_argument("action", choices=["pull"])
    m.add_argument("name", help="a hub repository: gpt2, distilgpt2, gpt2-medium, gpt2-xl, ...")
    m.add_argument("--revision", default=None, help="a branch, tag or commit (default main)")
    m.set_defaults(func=cmd_models)


def cmd_export_hf(args) -> None:
    """`nanospec export-hf`: a shipped model as a folder that transformers loads as it is."""
    from nanospec.hf.export import export

    out = export(args.checkpoints, args.model, args.out)
    print(
        f"{args.model} -> {out} (transformers: AutoModelForCausalLM.from_pretrained({str(out)!r}))"
    )


def cmd_models(args) -> None:
    """`nanospec models pull NAME`: fetch a hub folder into Hugging Face's cache, print where."""
    from nanospec.hf.pull import pull

    print(pull(args.name, args.revision))
