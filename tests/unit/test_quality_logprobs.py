"""Logprob agreement and perplexity: the KL lower bound over the union of two top-k lists (hand
cases and a property test against full distributions), the simulator's logprobs, and a real run
of two simulated endpoints."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abtui.quality.kl_union import intersection_bound, union_bound
from abtui.quality.logprobs import kl_lower_bound


def _top(p: dict[str, float], k: int) -> dict[str, float]:
    return dict(sorted(p.items(), key=lambda kv: -kv[1])[:k])


def _kl(p: dict[str, float], q: dict[str, float]) -> float:
    return sum(v * math.log(v / q[t]) for t, v in p.items() if v > 0)


# -- the bound, by hand --------------------------------------------------------------------


def test_identical_lists_give_zero():
    a = {"x": 0.5, "y": 0.2, "z": 0.1}
    assert union_bound(a, dict(a), 3) == 0.0
    assert (
        kl_lower_bound(
            {t: math.log(v) for t, v in a.items()}, {t: math.log(v) for t, v in a.items()}, 3
        )
        == 0.0
    )


def test_disjoint_lists_by_hand():
    # A lists x .5, y .3 (0.2 unlisted); B lists z .5, w .3 (0.2 unlisted). The intersection
    # bound sees nothing (both OTHER buckets hold everything: 0). Over the union, B can give x
    # and y at most 0.2 together (its unlisted mass), A likewise z and w; the least KL splits
    # B's 0.2 in proportion to A's (0.125, 0.075) and A's 0.2 in proportion to B's.
    a, b = {"x": 0.5, "y": 0.3}, {"z": 0.5, "w": 0.3}
    by_hand = 0.5 * math.log(0.5 / 0.125) + 0.3 * math.log(0.3 / 0.075)
    by_hand += 0.125 * math.log(0.125 / 0.5) + 0.075 * math.log(0.075 / 0.3)
    assert intersection_bound(a, b) == 0.0
    assert union_bound(a, b, 2) == pytest.approx(by_hand, rel=1e-9)
    # and the bound holds against a full pair of distributions with those top-2 lists
    full_a = {"x": 0.5, "y": 0.3, "z": 0.1, "w": 0.1}
    full_b = {"x": 0.1, "y": 0.1, "z": 0.5, "w": 0.3}
    assert union_bound(a, b, 2) <= _kl(full_a, full_b)


def test_union_strictly_above_intersection_and_below_the_true_kl():
    full_a = {"x": 0.6, "y": 0.25, "z": 0.1, "w": 0.05}
    full_b = {"x": 0.4, "z": 0.3, "y": 0.05, "w": 0.25}
    a, b = _top(full_a, 2), _top(full_b, 2)  # {x, y} and {x, z}: y and z in one list each
    inter, union = intersection_bound(a, b), union_bound(a, b, 2)
    assert inter < union - 0.01
    assert union <= _kl(full_a, full_b)


def test_a_list_longer_than_k_caps_unknowns_at_the_kth():
    # vLLM appends the sampled token to the top-k: B's cap for unknowns is its 2nd, not its 3rd
    a, b = {"x": 0.5, "y": 0.4}, {"x": 0.5, "z": 0.3, "q": 0.01}
    assert union_bound(a, b, 2) <= union_bound(a, b, None)


def test_lists_summing_to_one_fall_back_to_the_intersection():
    # rounded logprobs can sum past 1: never an infinite or made-up figure
    a, b = {"x": 0.6, "y": 0.4000001}, {"x": 0.5, "z": 0.5}
    assert union_bound(a, b, 2) == intersection_bound(a, b)
    assert math.isfinite(union_bound(a, b, 2))


# -- the bound, against full distributions -------------------------------------------------


@st.composite
def _pair(draw):
    n = draw(st.integers(3, 24))
    k = draw(st.integers(1, min(n, 8)))
    w = st.floats(0.001, 1.0)
    pa = np.array(draw(st.lists(w, min_size=n, max_size=n)))
    pb = np.array(draw(st.lists(w, min_size=n, max_size=n)))
    sharp = draw(st.sampled_from([1.0, 2.0, 4.0]))
    pa, pb = pa**sharp, pb ** draw(st.sampled_from([1.0, 2.0, 4.0]))
    pa, pb = pa / pa.sum(), pb / pb.sum()
    return (
        {str(i): float(v) for i, v in enumerate(pa)},
        {str(i): float(v) for i, v in enumerate(pb)},
        k,
    )


@settings(max_examples=300, deadline=None)
@given(_pair())
def test_bound_between_intersection_and_true_kl(pair):
    full_a, full_b, k = pair
    a, b = _top(full_a, k), _top(full_b, k)
    union = union_bound(a, b, k)
    assert intersection_bound(a, b) - 1e-12 <= union <= _kl(full_a, full_b) + 1e-9


def test_bound_is_the_minimum_found_by_a_general_solver():
    """Against scipy's trust-constr from several starts on the same convex problem: the exact
    solution is never above (it would not be the minimum) nor far below (it would be loose)."""
    from scipy.optimize import LinearConstraint, minimize

    rng = np.random.default_rng(5)
    for _ in range(6):
        n, k = 8, 3
        pa, pb = rng.dirichlet(np.ones(n)), rng.dirichlet(np.ones(n))
        full_a = {str(i): v for i, v in enumerate(pa)}
        full_b = {str(i): v for i, v in enumerate(pb)}
        a, b = _top(full_a, k), _top(full_b, k)
        oa = [a[t] for t in a if t not in b]
        ob = [b[t] for t in b if t not in a]
        if not oa:
            continue
        c = sum(a[t] * math.log(a[t] / b[t]) for t in a if t in b)
        ra, rb = 1 - sum(a.values()), 1 - sum(b.values())
        cx, cy = min(min(a.values()), ra), min(min(b.values()), rb)
        nx = len(ob)

        def f(z, c=c, ra=ra, rb=rb, oa=oa, ob=ob, nx=nx):
            x, y = np.maximum(z[:nx], 1e-300), np.maximum(z[nx:], 1e-300)
            po, qo = max(ra - x.sum(), 1e-300), max(rb - y.sum(), 1e-300)
            return (
                c
                + float(np.sum(x * np.log(x / ob)))
                + float(np.sum(oa * np.log(oa / y)))
                + po * math.log(po / qo)
            )

        m = np.zeros((2, nx + len(oa)))
        m[0, :nx], m[1, nx:] = 1, 1
        best = min(
            minimize(
                f,
                np.concatenate(
                    [
                        rng.uniform(0.1, 0.9, nx) * cx / (nx + 1),
                        rng.uniform(0.1, 0.9, len(oa)) * cy / (len(oa) + 1),
                    ]
                ),
                bounds=[(1e-12, cx)] * nx + [(1e-12, cy)] * len(oa),
                method="trust-constr",
                constraints=[LinearConstraint(m, [0, 0], [ra, rb])],
                options={"xtol": 1e-12, "gtol": 1e-12, "maxiter": 2000},
            ).fun
            for _ in range(2)
        )
        got = union_bound(a, b, k)
        assert got <= best + 1e-9
        assert got >= max(best, intersection_bound(a, b)) - 1e-5


# -- the simulator's logprobs --------------------------------------------------------------

# A 128k-context preset, variants differing only in weights (and KV) dtype; a fast time scale.
PRESET = "h100:llama-3.1-8b:"


def _req(prompt: str, *, k: int | None = 5, echo: bool = False, max_tokens: int = 16):
    from abtui.sim.engine import SimRequest

    return SimRequest(
        req_id=1,
        chat=False,
        prompt=prompt,
        prompt_tokens=len(prompt.split()),
        max_tokens=max_tokens,
        arrival_ns=0,
        logprobs=k,
        echo=echo,
    )


def _seqs(model, prompts) -> list:
    from abtui.sim.logprobs import score

    out = []
    for p in prompts:
        lp = score(model, _req(p)).logprobs
        out.append([[t, top] for t, top in zip(lp["tokens"], lp["top_logprobs"], strict=True)])
    return out


def _ppl(model) -> float:
    from abtui.quality.ppl import FIXED_TEXT, perplexity_of
    from abtui.sim.logprobs import score

    lp = score(model, _req(FIXED_TEXT, k=1, echo=True, max_tokens=1)).logprobs
    return perplexity_of({"choices": [{"logprobs": lp}]})[0]


def test_variants_depart_from_bf16_as_their_quantisation_grows():
    from abtui.quality.logprobs import compare, prompts
    from abtui.sim.logprobs import Model

    ps = prompts()
    for seed in (0, 7):
        bf16, fp8, int4 = (Model(seed, w) for w in ("bf16", "fp8", "int4"))
        ref = _seqs(bf16, ps)
        same = compare(ref, _seqs(Model(seed, "bf16"), ps))
        assert same.top1_agreement == 1.0 and same.kl_lower_bound == 0.0
        assert same.positions == 16 * len(ps)  # nothing departs: every position compared
        c8, c4 = compare(ref, _seqs(fp8, ps)), compare(ref, _seqs(int4, ps))
        assert 0.0 < c8.kl_lower_bound < c4.kl_lower_bound
        assert c4.top1_agreement < 1.0 and c4.positions < same.positions
        assert _ppl(bf16) < _ppl(fp8) < _ppl(int4) < 1.06 * _ppl(bf16)
    # another seed is another model: its text differs
    assert _seqs(Model(1), ps[:1]) != _seqs(Model(0), ps[:1])


def test_fp8_kv_touches_generated_tokens_only_and_more_at_long_context():
    from abtui.sim.logprobs import Model, kv_noise_sd, score

    assert _ppl(Model(3, "int4", "fp8")) == _ppl(Model(3, "int4"))  # prefill reads no KV
    assert kv_noise_sd("bf16", 100_000) == 0.0
    assert kv_noise_sd("fp8", 1000) == kv_noise_sd("fp8", 4096) < kv_noise_sd("fp8", 32768)
    a = score(Model(3), _req("Tell me about the river.")).logprobs
    b = score(Model(3, "bf16", "fp8"), _req("Tell me about the river.")).logprobs
    assert a["top_logprobs"][0] != b["top_logprobs"][0]


def test_sim_serves_logprobs_and_echo_over_http():
    import httpx

    from abtui.quality.ppl import perplexity_of
    from abtui.sim.engine import SimConfig
    from abtui.sim.process import SimProcess

    prompt = 'The "harbour" was quiet,\nand the boats rocked. '
    with SimProcess(SimConfig(seed=3)) as sim, httpx.Client(trust_env=False, timeout=30) as c:
        url = sim.url + "/completions"

        def post(**body):
            return c.post(url, json={"prompt": prompt, "max_tokens": 6, **body})

        plain = post().json()["choices"][0]
        got = post(logprobs=3, echo=True).json()["choices"][0]
        lp = got["logprobs"]
        n_prompt = len(prompt.split())
        assert len(lp["tokens"]) == n_prompt + 6
        assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
        assert got["text"] == prompt.rstrip() + plain["text"]  # bf16: the same greedy text
        for tok, off in zip(lp["tokens"], lp["text_offset"], strict=True):
            assert got["text"][off : off + len(tok)] == tok
        for tok, v, top in zip(
            lp["tokens"][n_prompt:],
            lp["token_logprobs"][n_prompt:],
            lp["top_logprobs"][n_prompt:],
            strict=True,
        ):
            assert len(top) == 3 and max(top, key=top.get) == tok and top[tok] == v  # greedy
        # a prompt token outside the top-3 is listed too (vLLM's way): 3 or 4 entries
        assert all(
            3 <= len(t) <= 4 and tok in t
            for tok, t in zip(lp["tokens"][1:n_prompt], lp["top_logprobs"][1:n_prompt], strict=True)
        )
        assert perplexity_of({"choices": [got]}, 6)[0] > 1.0
        assert post(logprobs=3).json()["choices"][0]["text"] == plain["text"]
        for bad in (21, -1, "3", True):
            r = post(logprobs=bad)
            assert r.status_code == 400 and "'logprobs'" in r.json()["error"]["message"]
        assert post(echo="yes").status_code == 400
        # streams and chat carry no logprobs
        stream = c.post(
            url, json={"prompt": prompt, "max_tokens": 3, "logprobs": 2, "stream": True}
        ).text
        assert '"logprobs":null' in stream and "[DONE]" in stream
        chat = c.post(
            sim.url + "/chat/completions",
            json={
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": 3,
                "logprobs": True,
                "top_logprobs": 2,
            },
        ).json()
        assert chat["choices"][0]["logprobs"] is None
    with SimProcess(SimConfig(seed=3, logprobs=False)) as off, httpx.Client(trust_env=False) as c:
        got = c.post(
            off.url + "/completions",
            json={"prompt": prompt, "max_tokens": 2, "logprobs": 3, "echo": True},
        ).json()
        assert got["choices"][0]["logprobs"] is None and perplexity_of(got) is None
        assert not got["choices"][0]["text"].startswith("The")  # echo ignored, like llama.cpp


def test_a_quality_prompt_keeps_the_face_answer():
    from abtui.quality.prompts import copy_prompt
    from abtui.sim.logprobs import Model, score
    from abtui.sim.quality_face import QualityFace, Variant

    for seed in range(80):  # int4's noise would beat the answer's margin on some of them
        item = copy_prompt(seed)
        for variant in (Variant("bf16"), Variant("int4", "fp8")):
            req = _req(item.prompt)
            QualityFace(3, variant).prepare(req)
            lp = score(Model(3, variant.weight_dtype, variant.kv_dtype), req).logprobs
            assert lp["tokens"] == list(req.answer)  # the answer, then a natural stop
            top = lp["top_logprobs"][0]
            assert max(top, key=top.get) == req.answer[0]


# -- end to end: abtui run against simulated endpoints -------------------------------------


def test_run_reports_ppl_and_logprob_agreement_per_pair(tmp_path, capsys):
    """One run, a BF16 baseline against an identical BF16 endpoint, an INT4 one and one that
    serves no logprobs: the stored figures and the report lines of every pair."""
    import json

    from abtui.cli import main
    from abtui.quality.logprobs import compare
    from abtui.report.export import write_report
    from abtui.sim.engine import SimConfig
    from abtui.sim.preset_cli import PresetOptions
    from abtui.sim.process import SimProcess
    from abtui.store.reader import SessionReader

    def sim(variant: str, logprobs: bool = True) -> SimProcess:
        opts = PresetOptions(PRESET + variant, time_scale=200)
        return SimProcess(SimConfig(seed=3, preset=opts, logprobs=logprobs))

    arms = {
        "base": sim("bf16"),
        "same": sim("bf16"),
        "int4": sim("int4"),
        "nolp": sim("bf16", logprobs=False),
    }
    with arms["base"] as a, arms["same"] as s, arms["int4"] as i, arms["nolp"] as n:
        urls = {"base": a.url, "same": s.url, "int4": i.url, "nolp": n.url}
        spec = tmp_path / "lp.toml"
        spec.write_text(
            'name = "lp"\n'
            + "".join(f'[[arms]]\nname = "{k}"\nurl = "{u}"\n' for k, u in urls.items())
            + "[workload]\nrequests = 6\ninput_tokens = 16\noutput_tokens = 4\n"
            + f'[load]\nrate = 20\n[store]\ndir = "{tmp_path}"\n'
            + '[quality]\nsuites = ["exact"]\nper_cell = 2\n[policy]\nresamples = 200\n'
        )
        rc = main(["run", str(spec), "--headless"])
    out = capsys.readouterr().out
    assert rc in (0, 3, 4), out
    with SessionReader(tmp_path / "lp.duckdb") as rd:
        meta = rd.meta()
        pairs = {p["candidate"]: p for p in rd.verdicts()[-1]["result"]["pairs"]}
    ppl, raw = meta["quality_ppl"], meta["quality_logprobs"]
    # perplexity: measured where the endpoint scores the prompt, INT4 higher, never made up
    assert ppl["base"]["supported"] and ppl["base"]["tokens"] > 100
    assert ppl["same"]["ppl"] == ppl["base"]["ppl"]
    assert ppl["base"]["ppl"] < ppl["int4"]["ppl"] < 1.06 * ppl["base"]["ppl"]
    assert ppl["nolp"] == {
        "supported": False,
        "ppl": None,
        "tokens": 0,
        "note": "not supported by this endpoint (no prompt logprobs in its answer)",
    }
    assert raw["nolp"]["supported"] is False
    # logprob agreement on the baseline's continuation
    same = compare(raw["base"]["sequences"], raw["same"]["sequences"])
    int4 = compare(raw["base"]["sequences"], raw["int4"]["sequences"])
    assert same.top1_agreement == 1.0 and same.kl_lower_bound == 0.0
    assert int4.top1_agreement < 1.0 and int4.kl_lower_bound > 0.0
    assert int4.kl_lo > 0.0 and int4.top1_hi <= 1.0
    lines = {k: p["quality"]["logprob_line"] for k, p in pairs.items()}
    assert "top-1 100.0% [100.0%, 100.0%], KL ≥ 0.0000 nats" in lines["same"]
    assert f"top-1 {int4.top1_agreement:.1%} [" in lines["int4"]
    assert f"KL ≥ {int4.kl_lower_bound:.4f} nats [{int4.kl_lo:.4f}, " in lines["int4"]
    assert "a lower bound" in lines["int4"]
    assert lines["nolp"] == "logprob agreement: not supported by this endpoint"
    # the same lines in the headless summary and the md / json reports
    write_report(tmp_path / "lp.duckdb", "md", str(tmp_path / "r.md"))
    md = (tmp_path / "r.md").read_text().replace("\\[", "[").replace("\\]", "]")
    for text in (out, md):
        text = " ".join(text.split())  # the console wraps long lines
        assert "perplexity of the fixed text (echo + logprobs): base 13." in text
        assert f"int4 {ppl['int4']['ppl']:.3f} (+" in text
        assert "nolp not supported by this endpoint" in text
        assert "logprob agreement: not supported by this endpoint" in text
        assert lines["int4"] in text and lines["same"] in text
    write_report(tmp_path / "lp.duckdb", "json", str(tmp_path / "r.json"))
    doc = json.loads((tmp_path / "r.json").read_text())
    got = {p["candidate"]: p["quality"] for p in doc["pairs"]}
    assert {k: q["logprob_line"] for k, q in got.items()} == lines
    assert got["int4"]["ppl"] == {"base": ppl["base"], "int4": ppl["int4"]}
    # the stored verdict read back (not computed again): records, with the same JSON
    from abtui.jsonable import json_ready
    from abtui.quality.ppl import Perplexity
    from abtui.verdict.saved import session_verdict

    computed = []
    back = session_verdict(tmp_path / "lp.duckdb", computing=lambda: computed.append(1))
    assert not computed
    for p in back.verdict.pairs:
        q = p.quality
        assert json_ready(q.to_dict()) == pairs[p.candidate]["quality"]
        assert q.logprob_line == lines[p.candidate]
        assert q.ppl[p.candidate] == Perplexity.from_dict(ppl[p.candidate])
        assert q.gate("exact") is q.gates[0] and q.suite("exact").n > 0


def test_flat_ppl_with_a_retrieval_drop_is_a_warning(tmp_path, capsys):
    """FP8 KV cache: prefill-only PPL cannot see it (flat), retrieval at long context drops (the
    gate fails) and the logprobs of generated tokens move (KL > 0): the verdict warns."""
    from abtui.cli import main
    from abtui.sim.engine import SimConfig
    from abtui.sim.preset_cli import PresetOptions
    from abtui.sim.process import SimProcess
    from abtui.store.reader import SessionReader

    def sim(variant: str) -> SimProcess:
        return SimProcess(SimConfig(seed=3, preset=PresetOptions(PRESET + variant, time_scale=200)))

    with sim("bf16") as a, sim("bf16:kv=fp8") as b:
        spec = tmp_path / "kv.toml"
        spec.write_text(
            f'name = "kv"\n[[arms]]\nname = "base"\nurl = "{a.url}"\n'
            f'[[arms]]\nname = "kv8"\nurl = "{b.url}"\n'
            "[workload]\nrequests = 6\ninput_tokens = 16\noutput_tokens = 4\n"
            f'[load]\nrate = 20\n[store]\ndir = "{tmp_path}"\n[policy]\nresamples = 200\n'
            # seed 2: the face's draws flip 2 of these 36 items (seed 6's flip none: few items)
            '[quality]\nsuites = ["keys"]\nper_cell = 3\nmax_length = 32768\nseed = 2\n'
        )
        rc = main(["run", str(spec), "--headless"])
    out = " ".join(capsys.readouterr().out.split())
    assert rc == 4, out  # 2 flips of 36 items: a drop not yet shown (it was NO-GO at rc 3)
    with SessionReader(tmp_path / "kv.duckdb") as rd:
        q = rd.verdicts()[-1]["result"]["pairs"][0]["quality"]
    assert q["ppl"]["kv8"]["ppl"] == q["ppl"]["base"]["ppl"]
    warn = [w for w in q["warnings"] if w.startswith("PPL flat")]
    assert warn and "but accuracy may have dropped: keys −" in warn[0].replace("-", "−"), q[
        "warnings"
    ]
    assert warn[0] in out
    assert "KL ≥ 0.0000 nats" not in q["logprob_line"]  # the decode's logprobs moved


def test_both_logprob_shapes_parse_and_bad_ones_are_refused():
    """Legacy completions logprobs (vLLM) and the chat-style ``content`` list that llama.cpp's
    llama-server returns for completions too (captured from it, trimmed); two listed tokens
    with the same text keep the likelier; anything malformed is "not supported", not a crash."""
    from abtui.quality.logprobs import parse

    legacy = {
        "choices": [
            {
                "logprobs": {
                    "tokens": [" a", " b"],
                    "top_logprobs": [{" a": -0.1, " c": -2.0}, {" b": -0.3}],
                }
            }
        ]
    }
    assert parse(legacy) == [(" a", {" a": -0.1, " c": -2.0}), (" b", {" b": -0.3})]
    server = {
        "choices": [
            {
                "text": "U so",
                "logprobs": {
                    "content": [
                        {
                            "id": 88,
                            "token": "U",
                            "bytes": [85],
                            "logprob": -2.16,
                            "top_logprobs": [
                                {"id": 88, "token": "U", "bytes": [85], "logprob": -2.16},
                                {"id": 491, "token": " sho", "logprob": -2.40},
                                {"id": 7, "token": "\ufffd", "logprob": -3.5},
                                {"id": 9, "token": "\ufffd", "logprob": -3.1},
                            ],
                        },
                        {
                            "id": 378,
                            "token": " so",
                            "logprob": -1.72,
                            "top_logprobs": [{"id": 378, "token": " so", "logprob": -1.72}],
                        },
                    ]
                },
            }
        ]
    }
    got = parse(server)
    assert got == [("U", {"U": -2.16, " sho": -2.40, "\ufffd": -3.1}), (" so", {" so": -1.72})]
    for bad in (
        {"choices": [{"logprobs": {"content": "x"}}]},
        {"choices": [{"logprobs": {"content": [{"token": "a", "top_logprobs": []}]}}]},
        {
            "choices": [
                {
                    "logprobs": {
                        "content": [
                            {"token": "a", "top_logprobs": [{"token": "a", "logprob": "high"}]}
                        ]
                    }
                }
            ]
        },
        {"choices": [{"logprobs": None}]},
        {},
    ):
        assert parse(bad) is None
