"""The workload a session sent, in one sentence: what the spec asked for (a file, or length
distributions with their parameters) next to what was measured on the measured requests (min,
median and P99 of prompt tokens, and of output tokens on the ok ones), and the images its
prompts carried (how many, of which pixel sizes, their median bytes).

Every output that states the workload — the headless summary, the Markdown, HTML and JSON
reports, the TUI's verdict screen — takes it from :func:`workload_shape`, so none can say
"fixed 512 tokens" about lognormal prompts: the measured figures sit beside the declared ones.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from abtui.metrics.table import NA, RequestTable


@dataclass(frozen=True, slots=True)
class Lengths:
    """Measured token counts: how many requests, their min, median and P99."""

    n: int
    min: float
    median: float
    p99: float

    def describe(self) -> str:
        return f"min {self.min:,.0f} · median {self.median:,.0f} · P99 {self.p99:,.0f}"


def lengths_of(col: np.ndarray) -> Lengths | None:
    """The :class:`Lengths` of an integer column (NULLs and non-positive values left out)."""
    x = np.asarray(col)
    x = x[(x != NA) & (x > 0)].astype(float)
    if not len(x):
        return None
    return Lengths(len(x), float(x.min()), float(np.median(x)), float(np.percentile(x, 99)))


def dist_words(text: str | None) -> str:
    """``lognormal:512:0.8`` → ``lognormal (median 512, σ 0.8)``; other grammar alike."""
    if not text:
        return "?"
    kind, _, rest = str(text).partition(":")
    args = rest.split(":") if rest else []
    if kind == "fixed" and len(args) == 1:
        return f"fixed {args[0]}"
    if kind == "uniform" and len(args) == 2:
        return f"uniform {args[0]}–{args[1]}"
    if kind == "normal" and len(args) == 2:
        return f"normal (mean {args[0]}, sd {args[1]})"
    if kind == "lognormal" and len(args) == 2:
        return f"lognormal (median {args[0]}, σ {args[1]})"
    if kind == "trace" and rest:
        return f"sampled from {rest}"
    return str(text)


@dataclass(frozen=True, slots=True)
class Images:
    """The images the measured prompts carried: how many prompts had any (of how many), the
    images in all, how many of each pixel size (most first) and their median bytes."""

    prompts: int
    of: int
    count: int
    sizes: tuple[tuple[str, int], ...]
    median_bytes: float

    def describe(self) -> str:
        sizes = ", ".join(f"{s} ×{n:,}" for s, n in self.sizes[:4])
        more = f" and {len(self.sizes) - 4} more sizes" if len(self.sizes) > 4 else ""
        return (
            f"images {self.count:,} in {self.prompts:,} of {self.of:,} prompts ({sizes}{more}; "
            f"median {self.median_bytes / 1e3:,.0f} kB)"
        )


def images_of(per_item: list[list[dict] | None]) -> Images | None:
    """The :class:`Images` of the measured items' stored images (None when none had any)."""
    sizes: dict[str, int] = {}
    nbytes = []
    prompts = 0
    for imgs in per_item:
        prompts += bool(imgs)
        for d in imgs or ():
            key = f"{d.get('width')}x{d.get('height')}"
            sizes[key] = sizes.get(key, 0) + 1
            nbytes.append(d.get("bytes") or 0)
    if not nbytes:
        return None
    ranked = tuple(sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0])))
    return Images(prompts, len(per_item), len(nbytes), ranked, float(np.median(nbytes)))


@dataclass(frozen=True, slots=True)
class WorkloadShape:
    """What was asked for (``source``: a file or ``synthetic``; the two distributions as the
    spec's grammar) and what was measured (``prompt``, ``output``: None without data)."""

    source: str
    input_dist: str | None
    output_dist: str | None
    prompt: Lengths | None
    output: Lengths | None
    seed: object = None
    prefix_groups: int = 0
    task: str | None = None
    history: str | None = None  # a conversation file's: "recorded" | "own" (None: no file)
    images: Images | None = None  # what the measured prompts carried (None: no image)
    images_asked: str | None = None  # the spec's made images: "2 × 512x512"

    def parts(self) -> list[str]:
        """The sentence's clauses, in reading order."""
        out = []
        if self.task:
            out.append(f"task {self.task}")
        if self.history is not None:
            out.append(f"conversations {self.source} ({self.history} history)")
        elif self.source != "synthetic":
            out.append(f"file {self.source}")
        sent = f"sent {self.prompt.describe()} tokens" if self.prompt else "none measured"
        if self.input_dist:
            out.append(f"prompts {dist_words(self.input_dist)}, {sent}")
        else:
            out.append(f"prompts {sent}")
        got = (
            f"generated {self.output.describe()} tokens (ok requests, every arm)"
            if self.output
            else "none generated"
        )
        if self.output_dist:
            out.append(f"max_tokens {dist_words(self.output_dist)}, {got}")
        else:
            out.append(f"outputs {got}")
        if self.images is not None:
            asked = f" ({self.images_asked} asked)" if self.images_asked else ""
            out.append(self.images.describe() + asked)
        elif self.images_asked:
            out.append(f"images {self.images_asked} per prompt asked, none stored")
        if self.prefix_groups:
            out.append(f"{self.prefix_groups} shared-prefix groups")
        if self.seed is not None:
            out.append(f"seed {self.seed}")
        return out

    def describe(self) -> str:
        return "; ".join(self.parts())

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("images", "images_asked"):  # left out where there were none (older outputs)
            if d[k] is None:
                del d[k]
        d["text"] = self.describe()
        return d


def _one_per_item(table: RequestTable) -> np.ndarray:
    """Prompt lengths, one per item and run (every arm sends the same prompts): the first
    request's count of each."""
    if not len(table):
        return np.zeros(0, dtype=np.int64)
    key = np.stack([table.run, table.item], axis=1)
    _, first = np.unique(key, axis=0, return_index=True)
    return table.n_input[np.sort(first)]


def workload_shape(
    spec: dict, table: RequestTable, images: list[list[dict] | None] | None = None
) -> WorkloadShape:
    """The workload of a stored ``spec`` (its ``workload`` section) and the measured
    (non-warm-up) requests of ``table``: prompts once per item, outputs of every arm's ok
    requests together; ``images``: the stored images of each measured item
    (:meth:`abtui.store.reader.SessionReader.item_images`)."""
    wl = (spec or {}).get("workload") or {}
    measured = table.select(~table.warmup) if len(table) else table
    ok = measured.select(measured.ok) if len(measured) else measured
    history = None
    if wl.get("conversations"):  # its turns' lengths are the file's: no distribution applies
        source, din, dout = str(wl["conversations"]), None, None
        history = str(wl.get("history") or "recorded")
    elif wl.get("file"):
        source, din, dout = str(wl["file"]), wl.get("input_dist"), wl.get("output_dist")
    else:
        source = "synthetic"
        din = wl.get("input_dist") or (
            f"fixed:{wl['input_tokens']}" if wl.get("input_tokens") is not None else None
        )
        dout = wl.get("output_dist") or (
            f"fixed:{wl['output_tokens']}" if wl.get("output_tokens") is not None else None
        )
    return WorkloadShape(
        source=source,
        input_dist=din,
        output_dist=dout,
        prompt=lengths_of(_one_per_item(measured)),
        output=lengths_of(ok.n_output),
        seed=wl.get("seed"),
        prefix_groups=int(wl.get("prefix_groups") or 0),
        task=wl.get("task"),
        history=history,
        images=images_of(images or []),
        images_asked=(
            f"{wl['images_per_request']} × {wl.get('image_size')}"
            if wl.get("images_per_request")
            else None
        ),
    )
