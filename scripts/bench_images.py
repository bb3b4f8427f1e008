#!/usr/bin/env python3
"""What images cost the load generator: making a PNG (:func:`abtui.client.images.png_bytes`)
and building a chat request body that carries them (:func:`abtui.client.stream.build_body`),
both on the generator's event loop before each request's send time. CPU time per call, median
of --repeat rounds of --n calls each.

    python scripts/bench_images.py
    python scripts/bench_images.py --sizes 256x256,1024x768 --images 4
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

from abtui.client.images import made_images, parse_size, png_bytes
from abtui.client.items import Item
from abtui.client.stream import Target, build_body


def _per_call_ms(fn, n: int) -> float:
    t = time.process_time()
    for i in range(n):
        fn(i)
    return (time.process_time() - t) / n * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="256x256,512x512,1024x768")
    ap.add_argument("--images", type=int, default=2, help="images per request body")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(
        f"# bench_images — {platform.system()}-{platform.release()} {platform.machine()}, "
        f"{os.cpu_count()} cpus, Python {platform.python_version()}; load average "
        f"{os.getloadavg()[0]:.2f}; CPU ms per call, median of {args.repeat}"
    )
    tgt = Target(base_url="http://127.0.0.1:1", model="m", api="chat")
    for text in args.sizes.split(","):
        w, h = parse_size(text)
        png_bytes(w, h, 0)  # the shared rows of this size, made once
        png = [
            _per_call_ms(lambda i, w=w, h=h: png_bytes(w, h, i), args.n) for _ in range(args.repeat)
        ]
        items = [
            Item(
                index=i,
                id=f"i{i}",
                prompt="what is in these",
                images=made_images(0, i, args.images, [(w, h)]),
            )
            for i in range(args.n)
        ]
        body = [
            _per_call_ms(lambda i, items=items: build_body(tgt, items[i]), args.n)
            for _ in range(args.repeat)
        ]
        size = len(png_bytes(w, h, 1))
        print(
            f"{text:>10}: PNG {size / 1e3:6.1f} kB, made in {statistics.median(png):.3f} ms; "
            f"a body with {args.images}: {len(build_body(tgt, items[0])) / 1e3:6.1f} kB, "
            f"built in {statistics.median(body):.3f} ms"
        )


if __name__ == "__main__":
    main()
