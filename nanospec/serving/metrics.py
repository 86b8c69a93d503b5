"""The server's Prometheus metrics, under vLLM's names, so a vLLM dashboard reads nanospec too.

Names as vLLM's v1 engine exports them (vLLM 0.11 and later: vllm/v1/metrics/loggers.py and
vllm/v1/spec_decode/metrics.py), with the same `model_name` and `engine` labels:

    vllm:num_requests_running            gauge      requests in a decode slot (or being scored)
    vllm:num_requests_waiting            gauge      requests queued for a slot
    vllm:prompt_tokens_total             counter    prompt tokens read, once per choice (below)
    vllm:generation_tokens_total         counter    tokens generated (what the clients get)
    vllm:request_success_total           counter    finished requests, by finished_reason
    vllm:kv_cache_usage_perc             gauge      share of the KV cache holding tokens (0-1)
    vllm:time_to_first_token_seconds     histogram  arrival -> the step with the first token
    vllm:inter_token_latency_seconds     histogram  between a request's successive steps
    vllm:e2e_request_latency_seconds     histogram  arrival -> finished
    vllm:request_queue_time_seconds      histogram  arrival -> its slot (waiting)
    vllm:request_prefill_time_seconds    histogram  its slot -> the step with the first token
    vllm:request_decode_time_seconds     histogram  first token -> last token
    vllm:request_inference_time_seconds  histogram  its slot -> last token (prefill + decode)
    vllm:request_time_per_output_token_seconds  histogram  decode time / (tokens - 1)
    vllm:spec_decode_num_drafts_total          counter  rounds that drafted (one per request)
    vllm:spec_decode_num_draft_tokens_total    counter  drafted tokens
    vllm:spec_decode_num_accepted_tokens_total counter  drafted tokens the target accepted
    vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}  counter  rounds whose
                                         draft at position i (0 to γ-1) was accepted

(vLLM before 0.11 called the inter-token histogram vllm:time_per_output_token_seconds.) Like
vLLM's, one inter-token observation is one *step*: a speculative round that emits four tokens
is one gap, not four. From these, PromQL gives the speculative figures: acceptance rate =
accepted / draft_tokens, mean acceptance length = 1 + accepted / drafts, and position i's
acceptance rate = per_pos{position="i"} / drafts (a round that accepts k drafts accepted
positions 0 to k-1, so the counts never grow with the position and sum to accepted).

The per-request histograms are observed once a request that held a slot ends (stop, length,
abort or error), prefill, decode, inference and per-token time only if it got a token
(vLLM's phases: queued, then prefill up to the first token, then decode). KV-cache usage is
what nanospec can say of a cache it preallocates whole: the tokens the busy slots hold (their
prompt and what they generated) over every slot's capacity (slots x max_len) — not memory in
use, which is always all of it (nanospec:kv_cache_bytes), but how full it is.

Memory, beside vLLM's names: the process's own (prometheus_client's process collector, as
vLLM's server exports it: process_resident_memory_bytes, ...) and what the engine holds for
every slot, whether a request is in it or not (its shapes are static, so these never change):

    nanospec:kv_cache_bytes       gauge  the target's KV cache, every slot, the whole context
    nanospec:draft_state_bytes    gauge  the drafter's state (the draft model's KV cache); 0 for AR

Each app has its own CollectorRegistry (tests build several apps in one process; the global
registry would refuse the second set of names). Every method is called from the engine thread
(the timeouts' counts, from the event loop); prometheus_client's metrics are thread-safe, so
/metrics may read them at any time.

"Request" here is what vLLM's engine calls one: a choice. A completion with n = 4 is four
engine requests, each reading its prompt, so vllm:prompt_tokens_total grows by four times the
prompt and request_success_total by four, where the reply's usage.prompt_tokens counts the
prompt once. That is vLLM's meaning: its v1 engine runs n = 4 as four child requests and adds
each one's prompt_len once its prefill is done (vllm/v1/metrics/stats.py,
IterationStats.update_from_output); vllm-project/vllm#56361 reports prompt_tokens_total = n x
prompt measured on vLLM 0.28. Kept so that a vLLM dashboard reads the same numbers here; a
choice that leaves before its slot was never read and is not counted.
A prompt scored without generating (echo with max_tokens 0) is a request like the others: its
prompt counted when its pass starts, its end counted as finished_reason "length" (what its
reply says), its queue time and e2e latency observed (it has no tokens, so no other phase).

Beside vLLM's names, the connections closed because a client was too slow to send a request
(guard.py): nanospec:client_timeouts_total, with `part` "headers" or "body".

What this file deliberately leaves out: prefix caching and preemption counts (nanospec has
neither), and the per-request token-count histograms.
"""

import jax
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)

# vLLM's buckets (seconds).
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
REQUEST_BUCKETS = E2E_BUCKETS  # vLLM's for queue, prefill, decode and inference time
TPOT_BUCKETS = ITL_BUCKETS
FINISHED_REASONS = ("stop", "length", "abort", "error")  # abort: the client left; error: we failed


class ServerMetrics:
    """The metrics of one server, labelled with its served model name."""

    def __init__(self, model_name: str, positions: int = 0):
        """`positions`: the most drafts a round can accept (γ), for the per-position counts."""
        self.registry = CollectorRegistry()
        labels = {"model_name": model_name, "engine": "0"}

        def make(kind, name, doc, **kw):
            return kind(name, doc, list(labels), registry=self.registry, **kw).labels(**labels)

        self.running = make(Gauge, "vllm:num_requests_running", "Requests in a decode slot.")
        self.waiting = make(Gauge, "vllm:num_requests_waiting", "Requests waiting for a slot.")
        self.prompt_tokens = make(
            Counter, "vllm:prompt_tokens", "Prompt tokens read, once per choice (as vLLM counts)."
        )
        self.generation_tokens = make(Counter, "vllm:generation_tokens", "Tokens generated.")
        self.ttft = make(
            Histogram,
            "vllm:time_to_first_token_seconds",
            "Time to first token in seconds.",
            buckets=TTFT_BUCKETS,
        )
        self.itl = make(
            Histogram,
            "vllm:inter_token_latency_seconds",
            "Inter-token latency in seconds.",
            buckets=ITL_BUCKETS,
        )
        self.e2e = make(
            Histogram,
            "vllm:e2e_request_latency_seconds",
            "End-to-end request latency in seconds.",
            buckets=E2E_BUCKETS,
        )
        self.drafts = make(Counter, "vllm:spec_decode_num_drafts", "Speculative drafts.")
        self.draft_tokens = make(Counter, "vllm:spec_decode_num_draft_tokens", "Draft tokens.")
        self.accepted_tokens = make(
            Counter, "vllm:spec_decode_num_accepted_tokens", "Accepted draft tokens."
        )
        per_pos = Counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted draft tokens at each position of the draft.",
            [*labels, "position"],
            registry=self.registry,
        )
        self.per_pos = lambda i: per_pos.labels(**labels, position=str(i))
        for i in range(positions):  # every position shows, 0 until a round accepts there
            self.per_pos(i)
        self.kv_usage = make(
            Gauge,
            "vllm:kv_cache_usage_perc",
            "KV-cache usage: tokens the busy slots hold over slots x max_len "
            "(1 = full; the memory itself is preallocated whole).",
        )
        phases = {
            "queue": "Time spent waiting for a slot",
            "prefill": "Time from a slot to the first token",
            "decode": "Time from the first token to the last",
            "inference": "Time from a slot to the last token",
        }
        self.phase = {
            name: make(
                Histogram,
                f"vllm:request_{name}_time_seconds",
                f"{doc}, in seconds.",
                buckets=REQUEST_BUCKETS,
            )
            for name, doc in phases.items()
        }
        self.tpot = make(
            Histogram,
            "vllm:request_time_per_output_token_seconds",
            "A request's decode time over its tokens after the first, in seconds.",
            buckets=TPOT_BUCKETS,
        )
        success = Counter(
            "vllm:request_success",
            "Successfully processed requests.",
            [*labels, "finished_reason"],
            registry=self.registry,
        )
        self.success = {r: success.labels(**labels, finished_reason=r) for r in FINISHED_REASONS}
        timeouts = Counter(
            "nanospec:client_timeouts",
            "Connections closed because the client was too slow to send a request's part.",
            [*labels, "part"],
            registry=self.registry,
        )
        self.timed_out = {p: timeouts.labels(**labels, part=p) for p in ("headers", "body")}
        ProcessCollector(registry=self.registry)  # process_resident_memory_bytes and the rest
        self.kv_cache_bytes = make(
            Gauge, "nanospec:kv_cache_bytes", "Bytes of the target's KV cache, every slot."
        )
        self.draft_state_bytes = make(
            Gauge,
            "nanospec:draft_state_bytes",
            "Bytes of the drafter's state (0 without one), every slot.",
        )

    def memory(self, state) -> None:
        """Set the memory gauges from the engine's state pytree: its `cache` (the target's),
        and its `dstate` if it has one (a speculative loop's drafter: for the draft model,
        its own KV cache; an autoregressive state has none)."""
        nbytes = lambda tree: sum(leaf.nbytes for leaf in jax.tree.leaves(tree))
        self.kv_cache_bytes.set(nbytes(state.cache))
        self.draft_state_bytes.set(nbytes(getattr(state, "dstate", None)))

    def load(self, running: int, waiting: int, kv_usage: float = 0.0) -> None:
        self.running.set(running)
        self.waiting.set(waiting)
        self.kv_usage.set(kv_usage)

    def step(self, tokens: int, since: float, first: bool, drafted: int, accepted: int) -> None:
        """One engine step gave a request `tokens` new tokens, `since` seconds after its arrival
        (first step) or after its previous step."""
        self.generation_tokens.inc(tokens)
        (self.ttft if first else self.itl).observe(since)
        if drafted:
            self.drafts.inc()
            self.draft_tokens.inc(drafted)
            self.accepted_tokens.inc(accepted)
            for i in range(accepted):  # accepting k drafts accepts positions 0 to k-1
                self.per_pos(i).inc()

    def finished(self, reason: str, seconds: float) -> None:
        self.success[reason].inc()
        self.e2e.observe(seconds)

    def phases(
        self, arrived: float, admitted: float, first: float | None, last: float | None, tokens: int
    ) -> None:
        """The phases of a request that held a slot, from its times (perf_counter seconds):
        arrived, admitted (its insert began), its first and last token's steps, if any."""
        self.phase["queue"].observe(admitted - arrived)
        if first is None:
            return
        decode = last - first
        self.phase["prefill"].observe(first - admitted)
        self.phase["decode"].observe(decode)
        self.phase["inference"].observe(last - admitted)
        self.tpot.observe(decode / (tokens - 1) if tokens > 1 else 0.0)  # vLLM's: 0 for one

    def exposition(self) -> bytes:
        """The text format Prometheus scrapes."""
        return generate_latest(self.registry)
