"""The continuous-batching engine (serving/engine.py): a request's tokens do not depend on its
neighbours — with the same seed they are exactly the tokens of the loop run alone at batch 1,
however many requests share the engine and whenever they arrive — slots are reused, nothing
recompiles as requests come and go, and bad requests are one sentence."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nanospec.drafters import DraftModel, PromptLookup
from nanospec.errors import UserError
from nanospec.generate import Decoder, pad_prompts
from nanospec.model import forward
from nanospec.rounds import generated
from nanospec.sampling import SamplingParams
from nanospec.serving.engine import Engine, Request
from nanospec.serving.steps import cache_size_for
from nanospec.speculative import Speculator
from nanospec.ssd.loop import SSDSpeculator
from nanospec.trees.loop import TreeSpeculator
from nanospec.trees.tree import Tree
from tests.statistical.laws import PROMPT, PROMPT_B, tiny_pair

REQUESTS = [
    Request(PROMPT, 9, 1.0, seed=5),
    Request(PROMPT_B, 12, 0.0, seed=1),
    Request(PROMPT, 7, 0.8, top_k=3, top_p=0.9, seed=2),
    Request(PROMPT_B[:3], 10, 1.0, seed=5),
    Request(PROMPT_B, 5, 1.0, seed=9),
]


@pytest.fixture(scope="module")
def pair():
    return tiny_pair()


def loops(pair):
    (cfg, g, _), draft = pair
    drafter = DraftModel(draft[1], draft[0])
    return {
        "ar": Decoder(graphdef=g, cfg=cfg, eos_id=-1),
        "draft": Speculator(graphdef=g, cfg=cfg, drafter=drafter, gamma=3, eos_id=-1),
        "ssd": SSDSpeculator(
            graphdef=g, cfg=cfg, drafter=drafter, gamma=3, eos_id=-1, fanout=(2, 1, 1, 1)
        ),
        "ngram": Speculator(
            graphdef=g, cfg=cfg, drafter=PromptLookup(cfg.vocab_size), gamma=3, eos_id=-1
        ),
        "tree": TreeSpeculator(
            graphdef=g,
            cfg=cfg,
            drafter=drafter,
            tree=Tree.from_branching((2, 1)),
            top=False,
            eos_id=-1,
        ),
    }


def alone(loop, pair, r: Request) -> list[int]:
    """The request's tokens from the loop's fused driver at batch 1."""
    (cfg, _, p), draft = pair
    tokens, lengths = pad_prompts([r.prompt], cfg.n_ctx)
    state, _ = loop.run(
        p,
        draft[2],
        tokens,
        lengths,
        jax.random.key(r.seed),
        SamplingParams.make(r.temperature, r.top_k, r.top_p),
        r.max_new,
    )
    return generated(state, lengths)[0]


def serve(engine: Engine, arrivals: dict[int, list[Request]]) -> dict[int, list[int]]:
    """Run the engine: arrivals[step] join a queue before each step, and the queue's head
    takes each free slot. -> {request index (arrival order): tokens}."""
    owner, out, queue, step = {}, {}, [], 0
    while engine.busy or queue or any(s >= step for s in arrivals):
        queue += [(len(out) + i, r) for i, r in enumerate(arrivals.get(step, []))]
        out.update({i: [] for i, _ in queue})
        while queue and engine.free_slots:
            i, r = queue.pop(0)
            owner[engine.insert(r)] = i
        for o in engine.step():
            out[owner[o.slot]] += o.tokens
            if o.done:
                del owner[o.slot]
        step += 1
    return out


@pytest.mark.parametrize("method", ["ar", "draft", "ssd", "ngram", "tree"])
def test_a_request_gets_its_own_tokens_at_any_load(pair, method):
    loop = loops(pair)[method]
    (_, _, p), draft = pair
    want = [alone(loop, pair, r) for r in REQUESTS]
    assert [len(w) for w in want] == [r.max_new for r in REQUESTS]
    # Alone in the engine, then with neighbours arriving while it decodes (two slots: the
    # last requests wait for a free one, and take the slot of one that finished).
    engine = Engine(loop, p, draft[2], slots=2)
    engine.warm([len(r.prompt) for r in REQUESTS])  # compiles; changes nobody's tokens
    for r, w in zip(REQUESTS, want):
        assert serve(engine, {0: [r]}) == {0: w}
    busy = serve(engine, {0: REQUESTS[:1], 1: REQUESTS[1:2], 3: REQUESTS[2:3], 9: REQUESTS[3:]})
    assert [busy[i] for i in range(len(REQUESTS))] == want
    # One step program, whatever arrived (prefills: one per prompt bucket).
    assert engine.step_programs == 1


def test_a_full_engine_and_bad_requests_are_one_sentence(pair):
    (cfg, g, p), draft = pair
    engine = Engine(loops(pair)["ar"], p, draft[2], slots=1)
    engine.insert(REQUESTS[0])
    with pytest.raises(UserError, match="All 1 slots are busy"):
        engine.insert(REQUESTS[1])
    for bad, message in (
        (REQUESTS[0]._replace(temperature=-1.0), "temperature must be"),
        (REQUESTS[0]._replace(max_new=0), "max_new"),
        (REQUESTS[0]._replace(min_new=10), "min_new must be 0 to max_new"),
        (REQUESTS[0]._replace(prompt=[1] * cfg.n_ctx), "context holds"),
    ):
        with pytest.raises(UserError, match=message):
            Engine(loops(pair)["ar"], p, draft[2], slots=1).insert(bad)
    with pytest.raises(UserError, match="at least one slot"):
        Engine(loops(pair)["ar"], p, draft[2], slots=0)


@pytest.mark.parametrize("method", ["ar", "draft", "ssd", "ngram", "tree"])
def test_caches_for_max_len_tokens_keep_each_requests_tokens(pair, method):
    """max_len (--max-model-len): every slot's cache holds max_len tokens, not the whole
    context; a request still emits what it emits alone, and one that would run past max_len
    ends there, as a request for fewer tokens would."""
    (cfg, _, p), draft = pair
    loop = loops(pair)[method]
    longest = max(len(r.prompt) + r.max_new for r in REQUESTS)
    engine = Engine(loop, p, draft[2], slots=2, max_len=longest)
    assert engine.state.cache.capacity == cache_size_for(longest, loop.block)
    # (these tiny models' whole context is 16 tokens, one multiple of 16 already; the
    # shipped ones at 80 tokens a request, γ = 4: 80 + 4 slots of slack, rounded up)
    assert (cache_size_for(80, 5), cache_size_for(256, 5)) == (96, 272)
    got = serve(engine, {0: REQUESTS[:2], 2: REQUESTS[2:]})
    assert [got[i] for i in range(len(REQUESTS))] == [alone(loop, pair, r) for r in REQUESTS]
    short = Engine(loop, p, draft[2], slots=1, max_len=len(PROMPT) + 4)
    assert serve(short, {0: [REQUESTS[0]]}) == {
        0: alone(loop, pair, REQUESTS[0]._replace(max_new=4))
    }
    with pytest.raises(UserError, match=f"context holds {len(PROMPT) + 4},"):
        short.insert(Request(PROMPT + [1] * 4, 3))
    with pytest.raises(UserError, match="must be 2 to"):
        Engine(loop, p, draft[2], slots=1, max_len=cfg.n_ctx + 1)


def test_the_closed_loop_keeps_every_slot_busy_until_all_requests_finish(pair):
    from nanospec.load.crossover import closed_loop

    (_, _, p), draft = pair
    engine = Engine(loops(pair)["draft"], p, draft[2], slots=2)
    done = closed_loop(engine, REQUESTS)
    assert done["tokens"] == sum(r.max_new for r in REQUESTS)  # no EOS in the tiny models
    assert len(done["tpot"]) == len(REQUESTS) and min(done["tpot"]) > 0
    assert not engine.busy and engine.free_slots == 2


def test_a_cancelled_request_frees_its_slot_and_leaves_the_others_alone(pair):
    loop = loops(pair)["draft"]
    (_, _, p), draft = pair
    want = [alone(loop, pair, r) for r in REQUESTS[:3]]
    engine = Engine(loop, p, draft[2], slots=2)
    kept, gone = engine.insert(REQUESTS[0]), engine.insert(REQUESTS[1])
    got = {kept: [], gone: []}
    for o in engine.step():
        got[o.slot] += o.tokens
    engine.cancel(gone)
    assert engine.free_slots == 1 and got[gone] == want[1][: len(got[gone])]
    third = engine.insert(REQUESTS[2])  # takes the cancelled request's row
    assert third == gone
    got[third] = []
    while engine.busy:
        for o in engine.step():
            got[o.slot] += o.tokens
    assert got[kept] == want[0] and got[third] == want[2]
    engine.cancel(third)  # a free slot: nothing to do
    assert engine.free_slots == 2


def test_each_step_reports_the_drafts_it_proposed_and_accepted_as_the_loop_counts_them(pair):
    loop = loops(pair)["draft"]
    (cfg, _, p), draft = pair
    r = REQUESTS[0]
    tokens, lengths = pad_prompts([r.prompt], cfg.n_ctx)
    _, stats = loop.run(
        p,
        draft[2],
        tokens,
        lengths,
        jax.random.key(r.seed),
        SamplingParams.make(r.temperature),
        r.max_new,
    )
    hist = stats.hist[0].tolist()
    engine = Engine(loop, p, draft[2], slots=2)
    engine.insert(r)
    engine.insert(REQUESTS[1])
    steps = []
    while engine.busy:
        steps += [o for o in engine.step() if o.slot == 0]
    per_round = [sum(o.accepted == k for o in steps if o.drafted) for k in range(len(hist))]
    assert per_round == hist  # the loop's acceptance histogram, round for round
    assert sum(o.drafted for o in steps) == int(stats.drafted[0]) == 3 * sum(hist)
    assert all(len(o.tokens) <= o.accepted + 1 for o in steps)


def test_stop_tokens_end_a_request_where_eos_would_end_it_alone(pair):
    """EOS, a stop id, or (ignore_eos) neither: the engine ends a request at its first stop
    token exactly where the loop run alone with that token as EOS stops, neighbours or not."""
    from dataclasses import replace

    loop = loops(pair)["draft"]
    (_, _, p), draft = pair
    r = Request(PROMPT, 12, 1.0, seed=5)
    full = alone(loop, pair, r)
    stop = full[5]  # a token the request makes mid-way (maybe earlier too)
    cut = full[: full.index(stop) + 1]
    assert alone(replace(loop, eos_id=stop), pair, r) == cut
    neighbour = Request(PROMPT_B, 10, 1.0, seed=1)
    eos_engine = Engine(replace(loop, eos_id=stop), p, draft[2], slots=2)
    got = serve(eos_engine, {0: [r, neighbour, r._replace(ignore_eos=True)]})
    assert got[0] == cut and got[2] == full
    assert got[1] == alone(replace(loop, eos_id=stop), pair, neighbour)
    engine = Engine(loop, p, draft[2], slots=2)
    outs = []
    engine.insert(r._replace(stop_ids=(stop,)))
    while engine.busy:
        outs += engine.step()
    assert sum((o.tokens for o in outs), []) == cut and outs[-1].stopped and outs[-1].done
    with pytest.raises(UserError, match="Token ids are 0 to"):
        engine.insert(r._replace(stop_ids=(10**6,)))
    assert engine.free_slots == 2


def held_greedy(pair, prompt, max_new: int, stops, min_new: int) -> list[int]:
    """vLLM's min_tokens written out on its own: greedy, one whole forward pass per token,
    the stop tokens' logits at −∞ while fewer than min_new tokens are made; ends at a stop."""
    (cfg, g, p), _ = pair
    seq, out = list(prompt), []
    while len(out) < max_new and not (out and out[-1] in stops):
        padded = jnp.asarray([seq + [0] * (cfg.n_ctx - len(seq))])  # one shape: one compile
        logits, _, _ = forward(g, p, padded, jnp.arange(cfg.n_ctx)[None])
        logits = np.array(logits[0, len(seq) - 1])  # causal: the padding is not seen
        if len(out) < min_new:
            logits[list(stops)] = -np.inf
        out.append(int(np.argmax(logits)))
        seq.append(out[-1])
    return out


@pytest.mark.parametrize("method", ["ar", "draft", "tree"])
def test_min_new_holds_the_stop_tokens_as_a_plain_masked_loop_does(pair, method):
    """Greedy, its own first two tokens as stop ids, min_new 4: the engine (speculating, with
    a neighbour) makes the masked loop's tokens; without the hold it stops at once."""
    (_, _, p), draft = pair
    loop = loops(pair)[method]
    r = Request(PROMPT, 10, 0.0)
    free = alone(loop, pair, r)
    stops = tuple(dict.fromkeys(free[:2]))
    want = held_greedy(pair, PROMPT, 10, stops, min_new=4)
    assert len(want) >= 5 and not set(want[:4]) & set(stops)  # the hold changed the text
    neighbour = Request(PROMPT_B, 6, 1.0, seed=3)
    got = serve(
        Engine(loop, p, draft[2], slots=2),
        {0: [r._replace(stop_ids=stops, min_new=4), neighbour, r._replace(stop_ids=stops)]},
    )
    assert got == {0: want, 1: alone(loop, pair, neighbour), 2: free[:1]}
