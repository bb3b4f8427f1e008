"""The batching engine's prefix cache: vLLM's automatic prefix caching, over the sim's tokens.

A prompt's tokens (the sim's tokenizer: whitespace-separated words, or the token ids given) are
cut into blocks of :data:`BLOCK_SIZE`; each *full* block is named by a hash of its content
chained with the hash of the block before it (:func:`block_hashes`), so two prompts share a
block's hash exactly when they share every token up to that block's end. A request admitted to
the batch looks its blocks up in order and stops at the first miss: the blocks found are its
cached prefix, whose prefill is not computed again (the step still reads their KV).

Blocks in use by running requests are held (reference counted); a block no request holds stays
cached in the KV cache's free space, in LRU order, until that space is needed: the cache's
capacity is the KV pool's free blocks (:meth:`PrefixCache.fit`), so a busy engine evicts more.
As in vLLM, at most ``prompt − 1`` tokens are served from the cache (the last prompt token is
computed to sample the first output token), and the counters count prompt tokens looked up
(``queries``) and found (``hits``) once per request, at its first admission.

Simplifications, stated: only the prompt's blocks are cached (vLLM caches generated tokens'
blocks too, which a conversation replayed with its own answers would hit), and a block shared by
requests running together is counted in each one's KV reservation (vLLM holds it once), so the
model never overstates the memory that sharing saves.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

BLOCK_SIZE = 16  # tokens per KV block (vLLM's default --block-size)


def block_hashes(tokens: list[str], block_size: int = BLOCK_SIZE) -> tuple[int, ...]:
    """The chained hashes of the full blocks of ``tokens`` (a trailing partial block has none)."""
    out: list[int] = []
    prev = b""
    for start in range(0, len(tokens) - block_size + 1, block_size):
        data = prev + "\x1f".join(tokens[start : start + block_size]).encode("utf-8", "replace")
        prev = hashlib.blake2b(data, digest_size=8).digest()
        out.append(int.from_bytes(prev, "little"))
    return tuple(out)


class PrefixCache:
    """Cached KV blocks by hash: those held by running requests (reference counts) and the
    free ones, evictable, least recently used first."""

    def __init__(self, block_size: int = BLOCK_SIZE) -> None:
        self.block_size = block_size
        self._held: dict[int, int] = {}  # hash -> running requests holding it
        self._free: OrderedDict[int, None] = OrderedDict()  # evictable, oldest first
        self.queries = 0  # prompt tokens looked up (vllm:prefix_cache_queries)
        self.hits = 0  # prompt tokens found (vllm:prefix_cache_hits)
        self.evictions = 0  # blocks evicted to make room

    def __len__(self) -> int:
        return len(self._held) + len(self._free)

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    def __contains__(self, h: int) -> bool:
        return h in self._held or h in self._free

    def lookup(self, hashes: tuple[int, ...], prompt_tokens: int, count: bool = True) -> int:
        """How many leading blocks of a prompt of ``prompt_tokens`` tokens are cached, at most
        those within its first ``prompt_tokens − 1`` tokens; ``count``: add the prompt to the
        queries and the found tokens to the hits."""
        limit = min(len(hashes), max(0, prompt_tokens - 1) // self.block_size)
        n = 0
        while n < limit and hashes[n] in self:
            n += 1
        if count:
            self.queries += prompt_tokens
            self.hits += n * self.block_size
        return n

    def acquire(self, hashes: tuple[int, ...]) -> None:
        """A running request holds these blocks (cached now if they were not)."""
        held, free = self._held, self._free
        for h in hashes:
            if h in free:
                del free[h]
            held[h] = held.get(h, 0) + 1

    def release(self, hashes: tuple[int, ...]) -> None:
        """A request let go of these blocks: those nobody holds become free, most recent last
        (a prompt's later blocks are evicted first, its shared start last)."""
        held, free = self._held, self._free
        for h in reversed(hashes):
            k = held.get(h)
            if k is None:
                continue
            if k > 1:
                held[h] = k - 1
            else:
                del held[h]
                free[h] = None
                free.move_to_end(h)

    def fit(self, room_blocks: int) -> None:
        """Evict free blocks, least recently used first, until at most ``room_blocks`` stay."""
        free = self._free
        while len(free) > max(0, room_blocks):
            free.popitem(last=False)
            self.evictions += 1
