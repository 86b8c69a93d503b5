"""GPT-2's shape works everywhere: V = 50,257 and a context of 1,024, read from Hugging Face
folders (measure/gpt2_shape.py writes them), through every method, the serving engine, the
traces and the demo.

The models are GPT-2's shape only where it matters to the code (the vocabulary, the context)
and tiny elsewhere (2 layers, width 32, 2 heads), so the file runs in about a minute. Their
matrices are scaled ×30 (gpt2_shape.write_random): at its init a random GPT gives near-uniform
laws and, greedy, repeats one token; scaled, the greedy text varies and its top two logits lie
well apart (0.2 at the least here), far beyond float rounding. The target and the draft share
the made-up tokenizer (gpt2_shape.made_up_tokenizer).
"""

import html
import json
from dataclasses import replace

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nanospec import SHIPPED
from nanospec.cli import main
from nanospec.decode import Bundle, decode
from nanospec.measure.gpt2_shape import GPT2_SMALL, made_up_tokenizer, write_random
from nanospec.model import GPT, forward
from nanospec.sampling import SamplingParams, sampling_probs
from nanospec.serving.engine import Request
from nanospec.serving.launch import build_engine
from nanospec.trees.tree import Tree

SHAPE = replace(GPT2_SMALL, n_layer=2, n_head=2, d_model=32)  # V and n_ctx: GPT-2's
# ~700 tokens of the made-up tokenizer (about two characters a token): positions run deep into
# the 1,024 context.
PROMPT = " ".join(
    f"The capital of country number {i} is a city called Town{i % 7} by the river."
    for i in range(18)
)
METHODS = {
    "draft": dict(method="draft"),
    "ngram": dict(method="ngram"),
    "ssd": dict(method="ssd"),
    "tree 2,1": dict(method="draft", tree=Tree.from_branching((2, 1))),
}
NEW = 16


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """(target, draft): the draft is the target's weights at 9/10 of its scale, another model
    that agrees with it about half the time (greedy, 32 tokens: acceptance 0.55, SSD hits 0.89), so
    rounds accept, reject and take the bonus. (Two random seeds would never agree.)"""
    out, tok = tmp_path_factory.mktemp("gpt2_shape"), made_up_tokenizer()
    target = write_random(out / "target", SHAPE, tok, seed=0, sharpen=30.0)
    draft = write_random(out / "draft", replace(SHAPE, name="draft"), tok, seed=0, sharpen=27.0)
    return target, draft


@pytest.fixture(scope="module")
def bundle(folders):
    target, draft = folders
    return Bundle.load(SHIPPED, ("target", "draft"), target=target, draft=draft)


@pytest.fixture(scope="module")
def greedy_ar(bundle):
    return decode(bundle, PROMPT, method="ar", temperature=0, max_new=NEW).tokens[0]


def test_the_folders_have_gpt2s_vocabulary_and_context(bundle):
    """The models are read with GPT-2's vocabulary and context, and the prompt reaches deep."""
    cfg = bundle.models["target"][0]
    assert (cfg.vocab_size, cfg.n_ctx) == (50_257, 1024) == (bundle.tok.vocab_size, 1024)
    assert 650 < len(bundle.tok.encode_prompt(PROMPT)) < 1024 - NEW


def test_the_memory_figures_by_hand():
    """Known answers: GPT-2 small has 124,439,808 parameters (tied output layer), 31% of them
    the embedding; a law over its vocabulary is 50,257 × 4 bytes, and SSD's default fan-out
    (one branch per k) caches γ+1 branches of γ laws each."""
    import doctest

    from nanospec.measure import gpt2_shape

    _, params = nnx.split(nnx.eval_shape(lambda: GPT(GPT2_SMALL, nnx.Rngs(0))))
    mem = gpt2_shape.memory(GPT2_SMALL, params)
    assert mem["params"] == 124_439_808 and round(mem["output_layer_share"], 2) == 0.31
    assert mem["kv_bytes_per_token"] == 2 * 12 * 768 * 4
    row = gpt2_shape.per_row(GPT2_SMALL, replace(GPT2_SMALL, n_layer=6), gamma=4)
    assert (row["law_bytes"], row["round_bytes"]) == (201_028, 9 * 201_028)
    assert (row["ssd_branches"], row["ssd_law_bytes"]) == (5, 20 * 201_028)
    assert doctest.testmod(gpt2_shape).failed == 0


@pytest.mark.parametrize("name", METHODS)
def test_greedy_speculation_is_autoregressive_decoding(bundle, greedy_ar, name):
    """At T = 0 every method's tokens are the target's greedy tokens, at positions ~700 of a
    1,024 context, with laws over 50,257 tokens."""
    got = decode(bundle, PROMPT, temperature=0, max_new=NEW, **METHODS[name]).tokens[0]
    assert got == greedy_ar


@pytest.mark.parametrize("cut", [dict(top_k=50), dict(top_p=0.9)], ids=["top_k", "top_p"])
def test_sampled_tokens_lie_in_the_targets_kept_set(bundle, cut):
    """At T = 1 with top-k 50 or top-p 0.9, every token any method emits has mass in the
    target's cut law at its position (recomputed by one uncached pass over the whole text): the
    cut is applied to p, and no method emits what the target's law excludes."""
    cfg, graphdef, params = bundle.models["target"]
    prompt = bundle.tok.encode_prompt(PROMPT)
    sp = SamplingParams.make(1.0, **cut)
    for name, how in {"ar": dict(method="ar"), **METHODS}.items():
        new = decode(bundle, PROMPT, temperature=1.0, max_new=NEW, seed=7, **cut, **how).tokens[0]
        seq = jnp.asarray([prompt + new])  # (1, T)
        logits, _, _ = forward(graphdef, params, seq, jnp.arange(seq.shape[1])[None])
        p = np.asarray(sampling_probs(logits[0, len(prompt) - 1 : -1], sp))  # (NEW, V)
        kept = p[np.arange(len(new)), new] > 0
        assert kept.all(), f"{name}: token {int(np.argmin(kept))} is outside the cut"


def test_the_engine_serves_gpt2s_shape(bundle, greedy_ar):
    """The continuous-batching engine serves a speculative method at this shape: a greedy
    request gets the AR tokens beside a sampled one with top-k 1000 / top-p 0.9, which runs
    to its length, and the two share one compiled step."""
    engine = build_engine(bundle, "draft", 4, slots=2)
    prompt = bundle.tok.encode_prompt(PROMPT)
    asks = [Request(prompt, NEW, 0.0), Request(prompt, NEW, 1.0, top_k=1000, top_p=0.9, seed=3)]
    owner = {engine.insert(r): i for i, r in enumerate(asks)}
    out = {0: [], 1: []}
    while engine.busy:
        for o in engine.step():
            out[owner[o.slot]] += o.tokens
    assert out[0] == greedy_ar
    assert len(out[1]) == NEW or out[1][-1] == bundle.tok.eos_id
    assert engine.step_programs == 1


def test_traces_name_tokens_and_the_demo_draws_the_folders(bundle, folders, tmp_path):
    """A traced run's events are JSON and name their tokens as the tokenizer does, and the
    demo draws a screenshot of the folder pair that shows the prompt. (The same prompt and
    settings, so the demo finds the traced run's programs compiled: aot.py.)"""
    events = decode(bundle, PROMPT, "draft", temperature=0, max_new=8, with_events=True).events
    json.dumps(events)
    named = [e for e in events if "token" in e and "text" in e]
    assert named and all(e["text"] == bundle.tok.token_str(e["token"]) for e in named)
    shot = tmp_path / "demo.svg"
    target, draft = folders
    argv = ["demo", "--target", str(target), "--draft", str(draft), "--prompt", PROMPT]
    argv += ["--temperature", "0", "--max-new-tokens", "8", "--screenshot", str(shot)]
    assert main(argv) == 0
    assert "by the river." in html.unescape(shot.read_text(encoding="utf-8")).replace("\xa0", " ")
