"""`nanospec models pull NAME`: the one command that reaches the network.

It fetches a GPT-2-family folder from the Hugging Face hub through `huggingface_hub`, into that
library's usual cache (~/.cache/huggingface/hub, or $HF_HOME), and prints the folder, which
`--target` and `--draft` then take:

    nanospec models pull gpt2-xl        # prints …/models--gpt2-xl/snapshots/<commit>
    nanospec models pull gpt2
    nanospec demo --target "$(nanospec models pull gpt2-xl)" --draft "$(nanospec models pull gpt2)"

Only the files nanospec reads are fetched (not the TensorFlow, Flax, ONNX or PyTorch-pickle
copies most GPT-2 repositories also hold). A folder already in the cache is not fetched again.

Offline, it fails in one sentence that says how to bring a folder in by hand. Nothing else in
nanospec imports this module.
"""

from pathlib import Path

from nanospec.errors import UserError

FILES = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "model.safetensors.index.json",
    "model-*.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
]


def pull(name: str, revision: str | None = None) -> Path:
    """Fetch hub repository `name` (gpt2, distilgpt2, openai-community/gpt2-xl, …); its folder."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    from nanospec.hf.folder import read_config

    try:
        folder = Path(snapshot_download(repo_id=name, revision=revision, allow_patterns=FILES))
    except GatedRepoError:
        raise UserError(f"{name} is gated on the hub: log in with `hf auth login` first.") from None
    except RepositoryNotFoundError:
        raise UserError(f"The hub has no model {name!r} (or it is private).") from None
    except RevisionNotFoundError:
        raise UserError(f"{name} has no revision {revision!r} on the hub.") from None
    except Exception as e:  # no network, DNS, a proxy, HF_HUB_OFFLINE=1: all mean "not reached"
        raise UserError(
            f"Could not fetch {name} from the Hugging Face hub ({type(e).__name__}): on a "
            f"machine that is online, run `nanospec models pull {name}` (or download the "
            "model's folder), copy the folder here and pass it as --target FOLDER."
        ) from None
    read_config(folder)  # a model that is not GPT-2's is named now, not at its first run
    return folder
