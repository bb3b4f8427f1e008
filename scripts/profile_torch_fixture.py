"""Write a real PyTorch profiler trace of a tiny CPU decoder for the profile readers' tests:
one prefill step and three decode steps, each in a vLLM-style step annotation
(``execute_context_N(T)_generation_M(T)``), as torch.profiler exports it (Chrome trace, gzip).

Needs torch (not one of abtui's dependencies): run it with a Python that has it, e.g.

    /work/venv-vllm/bin/python scripts/profile_torch_fixture.py tests/fixtures/profile/torch-cpu.pt.trace.json.gz
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function


class Block(torch.nn.Module):
    def __init__(self, d: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).unbind(2)
        a = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=n > 1
        )
        x = x + self.out(a.transpose(1, 2).reshape(b, n, d))
        return x + self.down(torch.nn.functional.silu(self.up(self.norm2(x))))


def main(out: str) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    emb, blocks, head = torch.nn.Embedding(256, 64), [Block(), Block()], torch.nn.Linear(64, 256)

    def step(tokens: torch.Tensor) -> torch.Tensor:
        x = emb(tokens)
        for blk in blocks:
            x = blk(x)
        probs = torch.softmax(head(x[:, -1]), -1)
        return torch.multinomial(probs, 1)

    prompt = torch.randint(0, 256, (1, 16))
    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("execute_context_1(16)_generation_0(0)"):
            tok = step(prompt)
        for _ in range(3):
            with record_function("execute_context_0(0)_generation_1(1)"):
                tok = step(tok)
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(plain))
        doc = json.loads(plain.read_text())
        doc["traceName"] = "torch-cpu.pt.trace.json"  # not the temporary path
        doc["host_name"] = "fixture"
        with gzip.open(out, "wt", encoding="utf-8") as f:
            json.dump(doc, f)
    print(f"{out}: torch {torch.__version__}, {len(doc['traceEvents'])} events")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "torch-cpu.pt.trace.json.gz")
