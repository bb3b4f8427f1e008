"""The simulator's prefix cache (abtui.sim.prefix_cache): chained block hashes, hits for shared
prefixes, reference-held blocks and LRU eviction of the free ones; and the batching engine
skipping the cached blocks' prefill."""

from __future__ import annotations

from abtui.sim.batching import BatchEngine, EngineOptions
from abtui.sim.prefix_cache import BLOCK_SIZE, PrefixCache, block_hashes
from abtui.sim.presets import parse_preset


def words(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def test_block_hashes_chain_the_prefix():
    a = block_hashes(words("w", 40))
    assert len(a) == 40 // BLOCK_SIZE  # the trailing partial block has no hash
    b = block_hashes(words("w", 32) + words("x", 16))
    assert a[:2] == b[:2] and a[1] != b[2]
    # the same block content after a different first block is another block
    c = block_hashes(words("v", 16) + words("w", 32)[16:32])
    assert c[1] != a[1]


def test_repeated_prefix_hits_up_to_the_last_prompt_token():
    cache = PrefixCache()
    h = block_hashes(words("s", 64))  # 4 blocks
    assert cache.lookup(h, 64) == 0 and (cache.queries, cache.hits) == (64, 0)
    cache.acquire(h)
    cache.release(h)
    # the whole prompt is cached, but its last token is computed: 3 blocks served
    assert cache.lookup(h, 64) == 3
    # a longer prompt with the same start: all 4 blocks
    longer = block_hashes(words("s", 64) + words("q", 10))
    assert cache.lookup(longer, 74) == 4
    assert (cache.queries, cache.hits) == (64 + 64 + 74, (3 + 4) * BLOCK_SIZE)
    # another prompt shares nothing
    assert cache.lookup(block_hashes(words("z", 64)), 64, count=False) == 0


def test_lru_eviction_keeps_held_blocks_and_the_recent_ones():
    cache = PrefixCache()
    a, b, c = (block_hashes(words(p, 4 * BLOCK_SIZE)) for p in "abc")
    for h in (a, b):
        cache.acquire(h)
        cache.release(h)
    cache.acquire(c)  # c is held: never evicted
    cache.fit(4)  # room for 4 free blocks: a (least recent) goes
    assert cache.free_blocks == 4 and cache.evictions == 4
    assert cache.lookup(a, 100, count=False) == 0
    assert cache.lookup(b, 100, count=False) == 4
    assert cache.lookup(c, 100, count=False) == 4
    cache.fit(2)  # b's later blocks go first: its start still hits
    assert cache.lookup(b, 100, count=False) == 2
    cache.fit(0)
    assert cache.lookup(b, 100, count=False) == 0 and cache.lookup(c, 100, count=False) == 4
    cache.release(c)
    assert cache.free_blocks == 4 and len(cache) == 4


def _engine(prefix_caching: bool) -> BatchEngine:
    opts = EngineOptions(prefix_caching=prefix_caching)
    return BatchEngine(parse_preset("h100:llama-3-8b:bf16"), opts)


def _serve(engine: BatchEngine, prompt: list[str]) -> tuple[float, int]:
    """One request alone on ``engine`` (driven step by step): its TTFT and cached tokens."""
    got: list[int] = []
    start = engine.now
    seq = engine.submit(len(prompt), 2, lambda n, last: got.append(n), start, block_hashes(prompt))
    first = None
    while (d := engine._plan_step()) is not None:
        engine.now += d
        engine._end_step()
        if first is None and got:
            first = engine.now - start
    return first, seq.cached


def test_the_engine_skips_the_cached_prefill():
    system = words("sys", 2000)
    on, off = _engine(True), _engine(False)
    ttft0, cached0 = _serve(on, system + words("q", 30))
    ttft1, cached1 = _serve(on, system + words("r", 30))
    ttft_off, cached_off = _serve(off, system + words("r", 30))
    assert (cached0, cached1) == (0, 2000 // BLOCK_SIZE * BLOCK_SIZE)
    assert cached_off == -1  # no lookup: the cache is off
    assert ttft1 < 0.3 * ttft0 and ttft_off > 0.9 * ttft0
    s = on.stats()
    assert s.prefix_caching and s.prefix_cache_queries_total == 2 * 2030
    assert s.prefix_cache_hits_total == cached1
    assert s.prompt_tokens_total == 2 * 2030  # cached tokens are prompt tokens too
    assert not off.stats().prefix_caching
