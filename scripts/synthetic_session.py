#!/usr/bin/env python3
"""Write a synthetic session file (``tests.synthetic``: two arms, the candidate 5% faster
in TPOT) that ``abtui report`` and the verdict read like any other, without running endpoints.

    python scripts/synthetic_session.py /tmp/s.duckdb --n 5000 --tokens 256

Used by ``scripts/bench_verdict.py --file`` to measure the verdict of a session read back from
its file (the path ``abtui run`` and ``abtui report`` take), at sizes a run on this machine
would take hours to produce. The rows and chunks go in with bulk inserts, ``--batch`` requests
at a time, so writing a file of 10⁸ chunks stays small.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

SPEC = {
    "slo": {"ttft": 0.1, "tpot": 0.02},
    "cost": {"gpu_price": 2.0},
    "policy": {},
}


def _by_id(t, req: np.ndarray):
    """``t`` with request ids ``req``, its rows (and their chunks) in id order."""
    from abtui.metrics.table import ROW_COLUMNS, RequestTable

    order = np.argsort(req, kind="stable")
    new_row = np.empty(len(order), dtype=np.int64)
    new_row[order] = np.arange(len(order))
    rows = {c: getattr(t, c)[order] for c in ROW_COLUMNS}
    rows["req"] = req[order]
    chunk_row = new_row[t.chunk_req_idx]
    c_order = np.argsort(chunk_row, kind="stable")
    return RequestTable(
        **rows,
        chunk_req_idx=chunk_row[c_order],
        chunk_t_ns=t.chunk_t_ns[c_order],
        chunk_n=t.chunk_n[c_order],
    )


def write_session(
    path: Path,
    n: int,
    tokens: int,
    batch: int = 20_000,
    seed: int = 1,
    resamples: int | None = None,
) -> None:
    """``n`` requests per arm of ``tokens`` one-token chunks each, into a new file at ``path``."""
    from abtui.metrics.table import NA, NULLABLE_COLUMNS
    from abtui.store.schema import REQUEST_COLUMNS
    from abtui.store.writer import SessionWriter

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root
    from tests.synthetic import ArmTruth, synthetic_table

    spec = dict(SPEC, policy={"resamples": resamples} if resamples else {})
    w = SessionWriter(path, overwrite=True)
    w.write_meta(spec=spec, session_name=path.stem, load=f"synthetic, {n} per arm")
    w.write_arms(
        [
            {"arm": 0, "name": "a", "role": "baseline", "url": "http://a/v1"},
            {"arm": 1, "name": "b", "role": "candidate", "url": "http://b/v1"},
        ]
    )
    truths = [ArmTruth(), ArmTruth(tpot_scale=0.95)]
    con = w.con
    for k0 in range(0, n, batch):
        k = min(batch, n - k0)
        t = synthetic_table(k, truths, n_output=tokens, rate=200, seed=seed * 1_000_003 + k0)
        # items and times continue across batches: item k0 + i, scheduled at (k0 + i) / rate
        shift = int(k0 / 200 * 1e9)
        for c in (
            "scheduled_ns",
            "dispatched_ns",
            "first_byte_ns",
            "done_ns",
            "first_token_ns",
            "last_token_ns",
        ):
            col = getattr(t, c)
            col[col != NA] += shift
        t.chunk_t_ns += shift
        t.item = t.item + k0
        # ids as a parallel run gives them: the arms' requests interleaved, stored in id order
        t = _by_id(t, 2 * t.item + t.arm)
        rows = {}
        for c in REQUEST_COLUMNS:
            if c in ("error_message", "finish_reason", "text", "conversation_id"):
                rows[c] = np.full(len(t), None, dtype=object)
                continue
            col = getattr(t, c)
            if c in NULLABLE_COLUMNS and (col == NA).any():
                col = np.ma.masked_equal(col, NA)
            rows[c] = col
        req_df = rows  # noqa: F841 (read by the replacement scan below)
        starts = np.cumsum(t.n_chunks) - t.n_chunks
        chunk_df = {  # noqa: F841
            "req": t.req[t.chunk_req_idx],
            "seq": np.arange(t.n_chunk_rows, dtype=np.int64) - starts[t.chunk_req_idx],
            "t_ns": t.chunk_t_ns,
            "n_tokens": t.chunk_n,
        }
        cols = ", ".join(REQUEST_COLUMNS)
        con.execute("BEGIN TRANSACTION")
        con.execute(f"INSERT INTO requests ({cols}) SELECT {cols} FROM req_df")
        con.execute("INSERT INTO chunks SELECT req, seq, t_ns, n_tokens FROM chunk_df")
        con.execute("COMMIT")
        del t, rows, req_df, chunk_df
    w.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", type=Path)
    ap.add_argument("--n", type=int, default=5000, help="requests per arm")
    ap.add_argument("--tokens", type=int, default=256, help="one-token chunks per request")
    ap.add_argument("--batch", type=int, default=20_000)
    ap.add_argument("--resamples", type=int, default=None)
    args = ap.parse_args()
    write_session(args.path, args.n, args.tokens, args.batch, resamples=args.resamples)
    print(f"wrote {args.path} ({args.path.stat().st_size / 2**20:.1f} MB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
