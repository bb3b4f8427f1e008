"""abtui.profile: the readers on fixtures our writer makes (each format's schema) and on a real
torch.profiler trace; the classifier, the phase split, the gaps, the difference between two
profiles and the Amdahl bounds, checked against figures worked out by hand."""

from __future__ import annotations

import gzip
import json
import math
import random
import shutil
import sqlite3
from pathlib import Path

import pytest

from abtui.profile.amdahl import SMALL_SHARE, amdahl, speedup_bound
from abtui.profile.analyse import analyse, compare
from abtui.profile.classes import DEFAULT, Classifier, load_class_table
from abtui.profile.model import ProfileError
from abtui.profile.phases import generic_phase, vllm_phase
from abtui.profile.read import read_trace
from abtui.profile.writer import (
    Annotation,
    Kernel,
    Launch,
    Op,
    chrome_trace,
    kern_sum_csv,
    ncu_csv,
    write_chrome,
    write_nsys_sqlite,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "profile"
PREFILL = "execute_context_1(512)_generation_0(0)"
DECODE = "execute_context_0(0)_generation_4(4)"


def timeline(gemm: float = 28.0, decode_end: float = 40.0) -> tuple[list, list]:
    """One prefill step and two decode steps (µs), worked out by hand below:

    prefill [0, 100]: GEMM 15→75 (60), attention 75→95 (20), norm 95→100 (5)
        wall 100, covered 85, idle 15;
    decode [200, 200+E] and [300, 300+E] (E = ``decode_end``): GEMV ``gemm`` µs from +2, then
        paged attention 6, sampling 2; the second step also a DtoH copy of 2 µs launched inside
        the step but run right after its end; one kernel launched at 500, outside every step.
    """
    anns = [Annotation(PREFILL, 0, 100, gpu=True)]
    ks = [
        Kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 15, 60, launch=1),
        Kernel("flash_fwd_kernel", 75, 20, launch=2),
        Kernel("void vllm::rms_norm_kernel<c10::BFloat16>", 95, 5, launch=3),
    ]
    for t0 in (200, 300):
        anns.append(Annotation(DECODE, t0, decode_end, gpu=True))
        a = t0 + 2 + gemm
        ks += [
            Kernel("gemv2T_kernel_val<int, int, __nv_bfloat16>", t0 + 2, gemm, launch=t0 + 1),
            Kernel("paged_attention_v1_kernel", a, 6, launch=t0 + 1.5),
            Kernel("top_k_top_p_sampling_from_probs", a + 6, 2, launch=t0 + 1.7),
        ]
    ks.append(
        Kernel(
            "Memcpy DtoH (Device -> Pinned)", 300 + decode_end, 2, 298 + decode_end, "gpu_memcpy"
        )
    )
    ks.append(Kernel("warmup_gemm_kernel", 500, 10, launch=500))
    return ks, anns


@pytest.fixture
def base_trace(tmp_path):
    ks, anns = timeline()
    return write_chrome(tmp_path / "base.pt.trace.json.gz", chrome_trace(ks, annotations=anns))


# --------------------------------------------------------------------- Chrome trace


def test_chrome_device_trace_phases_shares_and_gaps(base_trace):
    t = read_trace(base_trace)
    assert (t.format, t.side, t.timeline) == ("chrome", "device", True)
    assert t.version == "Kineto schemaVersion 1" and "Simulated GPU" in t.notes
    p = analyse(t)
    assert set(p.phases) == {"prefill", "decode", "unmarked"}
    pre, dec = p.phases["prefill"], p.phases["decode"]
    assert (pre.steps, pre.wall_us, pre.idle_us) == (1, 100, 15)
    assert pre.busy_us == {"gemm": 60, "attention": 20, "norm_elementwise": 5}
    assert pre.share("gemm") == pytest.approx(60 / 85)
    assert pre.share("idle") == pytest.approx(0.15)
    # decode: step 1 wall 40 (covered 36), step 2 wall 42 (the copy runs to 342; covered 38)
    assert (dec.steps, dec.wall_us, dec.idle_us) == (2, 82, 8)
    assert dec.busy_us == {"gemm": 56, "attention": 12, "sampling": 4, "memcpy": 2}
    assert dec.per_step_us == 41
    assert p.phases["unmarked"].busy_us == {"gemm": 10}
    # between steps: span 0..342 less the three windows 100 + 40 + 42
    assert p.between_us == pytest.approx(342 - 182)
    assert pre.top[0][:2] == ("sm90_xmma_gemm_bf16bf16_bf16f32", "gemm")


def test_kernels_without_launch_calls_use_the_device_steps(tmp_path):
    ks, anns = timeline()
    ks = [Kernel(k.name, k.start, k.dur, None, k.cat) for k in ks]
    doc = chrome_trace(ks, annotations=anns)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "user_annotation"]
    p = analyse(read_trace(write_chrome(tmp_path / "t.json", doc)))
    # the copy at 340..342 starts after the device's step window [300, 340]: unmarked now
    assert p.phases["decode"].busy_us == {"gemm": 56, "attention": 12, "sampling": 4}
    assert p.phases["unmarked"].busy_us == {"gemm": 10, "memcpy": 2}


def test_overlapping_steps_do_not_count_the_overlap_twice(tmp_path):
    """Asynchronous scheduling: step 2's host annotation [20, 30] starts while step 1's GEMM
    (5..45) still runs; its own GEMM runs 45..85. The device was idle 0..5 only."""
    anns = [Annotation(DECODE, 0, 10), Annotation(DECODE, 20, 10)]
    ks = [Kernel("gemv_a", 5, 40, launch=1), Kernel("gemv_b", 45, 40, launch=21)]
    p = analyse(read_trace(write_chrome(tmp_path / "t.json", chrome_trace(ks, annotations=anns))))
    dec = p.phases["decode"]
    assert (dec.steps, dec.wall_us, dec.idle_us, dec.total_busy) == (2, 85, 5, 80)
    assert p.between_us == 0


def test_a_trace_without_steps_is_one_phase(tmp_path):
    ks = [Kernel("gemm_a", 0, 10, launch=0), Kernel("rms_norm", 12, 3), Kernel("gemm_b", 20, 5)]
    p = analyse(read_trace(write_chrome(tmp_path / "t.json", chrome_trace(ks)))).phases
    assert list(p) == ["all"]
    assert (p["all"].steps, p["all"].wall_us, p["all"].idle_us) == (0, 25, 7)
    assert p["all"].busy_us == {"gemm": 15, "norm_elementwise": 3}


def test_host_operators_count_self_time_and_inherit_their_parents_class(tmp_path):
    ops = [
        Op("aten::linear", 0, 50),
        Op("aten::t", 1, 2),  # other: takes aten::linear's class
        Op("aten::addmm", 5, 40),
        Op("aten::copy_", 6, 2),  # memcpy: a class of its own, kept
        Op("aten::softmax", 60, 10),
        Op("aten::_softmax", 61, 8),
    ]
    anns = [Annotation("execute_context_0(0)_generation_1(1)", 0, 100)]
    t = read_trace(write_chrome(tmp_path / "cpu.json", chrome_trace(ops=ops, annotations=anns)))
    assert t.side == "host"
    dec = analyse(t).phases["decode"]
    # linear 50 − 2 − 40 = 8, t 2, addmm 40 − 2 = 38: GEMM 48; softmax 10 − 8 = 2, _softmax 8
    assert dec.busy_us == {"gemm": 48, "memcpy": 2, "sampling": 10}
    assert (dec.wall_us, dec.idle_us) == (100, 40)


def test_a_real_torch_profiler_trace():
    """A trace torch 2.13's profiler wrote (scripts/profile_torch_fixture.py): a tiny CPU
    decoder, one prefill and three decode steps in vLLM's step annotations."""
    t = read_trace(FIXTURES / "torch-cpu.pt.trace.json.gz")
    assert (t.format, t.side, t.version) == ("chrome", "host", "Kineto schemaVersion 1")
    assert [s.phase for s in t.steps] == ["prefill", "decode", "decode", "decode"]
    p = analyse(t)
    pre, dec = p.phases["prefill"], p.phases["decode"]
    assert (pre.steps, dec.steps) == (1, 3)
    for ph in (pre, dec):
        assert {"gemm", "attention", "norm_elementwise", "sampling"} <= set(ph.busy_us)
        # self times add up to the union of the operators' time: no double counting
        assert ph.total_busy == pytest.approx(ph.wall_us - ph.idle_us, rel=1e-6)
        assert ph.share("gemm") > ph.share("attention")
    names = {n for n, *_ in pre.top + dec.top}
    assert "aten::addmm" in names
    assert pre.per_step_us > dec.per_step_us  # 16 tokens against 1


# ------------------------------------------------------------------- Nsight Systems


def test_nsys_sqlite_gives_the_chrome_figures(tmp_path):
    ks, anns = timeline()
    t = read_trace(write_nsys_sqlite(tmp_path / "r.sqlite", ks, anns))
    assert (t.format, t.version) == ("nsys-sqlite", "export schema 3.11.1")
    p = analyse(t)
    assert p.phases["prefill"].busy_us == {"gemm": 60, "attention": 20, "norm_elementwise": 5}
    dec = p.phases["decode"]
    assert (dec.steps, dec.wall_us, dec.idle_us) == (2, 82, 8)
    assert dec.busy_us == {"gemm": 56, "attention": 12, "sampling": 4, "memcpy": 2}


def test_nsys_sqlite_without_runtime_places_kernels_by_their_start(tmp_path):
    ks, anns = timeline()
    t = read_trace(write_nsys_sqlite(tmp_path / "r.sqlite", ks, anns, runtime=False))
    assert any("no CUDA runtime table" in n for n in t.notes)
    assert analyse(t).phases["unmarked"].busy_us == {"gemm": 10, "memcpy": 2}


def test_nsys_kern_sum_csv(tmp_path):
    ks, _ = timeline()
    f = tmp_path / "kern_sum.csv"
    f.write_text(kern_sum_csv(ks))
    t = read_trace(f)
    assert (t.format, t.timeline) == ("nsys-kern-sum", False)
    p = analyse(t).phases
    assert list(p) == ["all"]
    assert p["all"].busy_us == {
        "gemm": 60 + 56 + 10,
        "attention": 20 + 12,
        "norm_elementwise": 5,
        "sampling": 4,
    }
    assert p["all"].wall_us is None and p["all"].share("idle") is None
    line = amdahl(analyse(t), ("gemm",))[0]
    assert not line.gaps_known and line.share == pytest.approx(126 / 167)


# ------------------------------------------------------------------- Nsight Compute

LAUNCHES = [
    Launch("sm90_xmma_gemm_bf16bf16_bf16f32", 1200.0, 80.0, 40.0),
    Launch("gemv2T_kernel_val", 400.0, 90.0, 60.0),
    Launch("flash_fwd_kernel", 400.0, 30.0, None),
    Launch("rms_norm_kernel", None, 70.0, 50.0),
]


@pytest.mark.parametrize("page", ["details", "raw"])
def test_ncu_csv_both_pages(tmp_path, page):
    f = tmp_path / f"ncu-{page}.csv"
    f.write_text(ncu_csv(LAUNCHES, page))
    t = read_trace(f)
    assert (t.format, t.timeline, len(t.metrics)) == ("ncu-csv", False, 4)
    assert t.metrics[0].duration_us == pytest.approx(1200.0)  # 1.2 ms on the details page
    p = analyse(t)
    dram, occ, n = p.class_metrics["gemm"]
    # weighted by duration: (1200·80 + 400·90) / 1600, (1200·40 + 400·60) / 1600
    assert (dram, occ, n) == (pytest.approx(82.5), pytest.approx(45.0), 2)
    assert p.class_metrics["attention"] == (30.0, None, 1)
    assert p.class_metrics["norm_elementwise"] == (70.0, 50.0, 1)  # no duration: weight 1
    assert p.phases["all"].busy_us == {"gemm": 1600, "attention": 400, "norm_elementwise": 0}


def test_ncu_thousands_separators(tmp_path):
    f = tmp_path / "n.csv"
    f.write_text(ncu_csv([Launch("big_gemm", 1_234_567.0, 1.0, 2.0)], "raw"))
    assert read_trace(f).metrics[0].duration_us == pytest.approx(1_234_567.0)


# --------------------------------------------------------------- classes and phases


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "gemm"),
        ("nvjet_tst_64x8_64x16_4x1_v_bz_TNN", "gemm"),
        ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm>", "gemm"),
        ("fused_moe_kernel", "gemm"),
        ("aten::addmm", "gemm"),
        ("_C::onednn_mm", "gemm"),
        ("void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128>>", "attention"),
        ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16>", "attention"),
        ("kernel_unified_attention_2d", "attention"),
        ("void vllm::rms_norm_kernel<c10::BFloat16>", "norm_elementwise"),
        ("void vllm::act_and_mul_kernel<silu>", "norm_elementwise"),
        ("triton_poi_fused_mul_silu_0", "norm_elementwise"),
        ("void at::native::vectorized_elementwise_kernel<4>", "norm_elementwise"),
        ("aten::index_select", "norm_elementwise"),
        ("flashinfer::sampling::TopKTopPSamplingFromProbKernel", "sampling"),
        ("void at::native::(anonymous)::cunn_SoftMaxForward<4, float>", "sampling"),
        ("radixSortKVInPlace", "sampling"),
        ("aten::multinomial", "sampling"),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "communication"),
        ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>", "communication"),
        ("Memcpy HtoD (Pageable -> Device)", "memcpy"),
        ("aten::copy_", "memcpy"),
        # vLLM's CPU build (its _C ops, as torch.profiler names them)
        ("_C::cpu_attention_with_kv_cache", "attention"),
        ("_C::cpu_attn_reshape_and_cache", "attention"),
        ("vllm::unified_kv_cache_update", "attention"),
        # the simulator's (abtui.sim.profiler)
        ("cutlass_scaled_mm_sm90_fp8_e4m3", "gemm"),
        ("marlin_gemm_int4", "gemm"),
        ("topk_topp_sampling_kernel", "sampling"),
        ("_C::weight_packed_linear", "gemm"),
        ("_C::rms_norm", "norm_elementwise"),
        ("_C::silu_and_mul", "norm_elementwise"),
        ("_C::rotary_embedding", "norm_elementwise"),
        ("_C::dynamic_per_token_scaled_fp8_quant", "norm_elementwise"),
        ("_C::shm_allreduce", "communication"),
        ("_C::shm_send_tensor_list", "communication"),
        # names from real Kineto GPU traces
        ("cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1", "gemm"),
        ("ampere_sgemm_32x32_sliced1x4_tn", "gemm"),
        ("void gemmk1_kernel<float, 256, 5, false>", "gemm"),
        ("aten::conv2d", "gemm"),
        ("Cijk_Ailk_Bljk_BBS_BH_MT128x128x64_MI16x16x16", "gemm"),
        ("__amd_rocclr_copyBuffer", "memcpy"),
        ("CatArrayBatchedCopy", "norm_elementwise"),
        ("Rmsnorm2dFwd", "norm_elementwise"),
        ("kn_mla_reduce", "attention"),
        ("fmoe_bf16_blockscaleFp8_g1u1", "gemm"),
        ("MoeSortingKernel", "other"),  # MoE routing
        ("void moe_align_block_size_kernel", "other"),
        ("topkGatingSoftmax", "other"),
        ("grouped_topk_opt_sort", "other"),
        ("_C::convert_fp8", "other"),  # not a convolution
        ("aten::empty", "other"),
        ("aten::property", "other"),  # "rope" inside a word is not rotary
    ],
)
def test_builtin_classes(name, cls):
    assert Classifier().classify(name) == cls


def test_memcpy_activities_are_memcpy_whatever_their_name():
    assert Classifier().classify("Memset (Device)", "memset") == "memcpy"
    assert Classifier().classify("something", "memcpy") == "memcpy"


def test_a_users_table_comes_first(tmp_path):
    f = tmp_path / "spec.toml"
    f.write_text(
        '[profile.classes]\ngemm = ["my_fp4_kernel"]\nmoe_gate = ["topkGating"]\n'
        'attention = ["^sm90_xmma_gemm_attn"]\n'
    )
    table = load_class_table(f)
    c = Classifier(table)
    assert c.classify("my_fp4_kernel_v2") == "gemm"
    assert c.classify("topkGatingSoftmax") == "moe_gate"  # built-in: other (MoE routing)
    assert c.classify("sm90_xmma_gemm_attn_fused") == "attention"
    assert c.classify("sm90_xmma_gemm_bf16") == "gemm"
    assert table.order[-2:] == ("moe_gate", "other") and table.label("moe_gate") == "moe_gate"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[profile.classes]\ngemm = ["("]\n', "profile.classes.gemm: the pattern '(' is not"),
        ('[profile.classes]\nidle = ["x"]\n', "profile.classes.idle: a class name is"),
        ('[profile.classes]\nGEMM = ["x"]\n', "profile.classes.GEMM: a class name is"),
        ('[profile.classes]\ngemm = "x"\n', "profile.classes.gemm: give a list"),
        ("[profile]\nx = 1\n", "no [profile.classes] table"),
        ("[profile.classes\n", "not valid TOML"),
    ],
)
def test_a_bad_class_table_is_named(tmp_path, text, message):
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(ProfileError, match="c.toml") as e:
        load_class_table(f)
    assert message in e.value.message


@pytest.mark.parametrize(
    ("label", "phase"),
    [
        ("execute_context_2(4096)_generation_0(0)", "prefill"),
        ("execute_context_0(0)_generation_30(30)", "decode"),
        ("execute_context_1(512)_generation_30(30)", "mixed"),
        ("execute_context_0(0)_generation_0(0)", None),
        (
            "execute_4126_context_2(sq4096sk4096sqsq8388608sqsk8388608)_generation_30(sq30sk9000"
            "sqsq30sqsk9000)",
            "mixed",
        ),
        (
            "execute_30_context_0(sq0sk0sqsq0sqsk0)_generation_30(sq30sk9000sqsq30sqsk9000)",
            "decode",
        ),
        ("gpu_model_runner: forward", None),
    ],
)
def test_vllm_step_annotations(label, phase):
    assert vllm_phase(label) == phase


def test_generic_phase_words():
    assert generic_phase("forward_extend") == "prefill"
    assert generic_phase("step[EXTEND bs=2]") == "prefill"  # SGLang-style forward modes
    assert generic_phase("step[DECODE bs=4]") == "decode"
    assert generic_phase("Prefill batch") == "prefill"
    assert generic_phase("run_decode") == "decode"
    assert generic_phase("decoder_layer") is None  # not the word "decode"
    assert generic_phase("prefill+decode") == "mixed"


# ---------------------------------------------------------------- comparison, Amdahl


def test_amdahl_bounds_by_hand():
    assert speedup_bound(0.84) == pytest.approx(6.25)  # 1 / 0.16
    assert speedup_bound(0.84, 2) == pytest.approx(1 / (0.16 + 0.42))  # ×1.72
    assert speedup_bound(0.0) == 1.0 and speedup_bound(0.5, 1) == 1.0
    assert math.isinf(speedup_bound(1.0))
    assert speedup_bound(1.0, 4) == pytest.approx(4.0)
    with pytest.raises(ValueError):
        speedup_bound(1.5)


def test_compare_and_amdahl_agree_when_only_the_gemms_get_twice_as_fast(tmp_path, base_trace):
    """The candidate's GEMV takes 14 µs, not 28, and its steps end 14 µs sooner: the decode
    step falls from 41 to 27 µs, ×82/54, exactly the bound for GEMM 2× faster."""
    ks, anns = timeline(gemm=14.0, decode_end=26.0)
    cand = write_chrome(tmp_path / "cand.json", chrome_trace(ks, annotations=anns))
    a, b = analyse(read_trace(base_trace), name="bf16"), analyse(read_trace(cand), name="fp8")
    diffs = {d.phase: d for d in compare(a, b)}
    dec = diffs["decode"]
    assert dec.per_step and (dec.a_time, dec.b_time) == (41, 27)
    assert dec.speedup == pytest.approx(41 / 27)
    by_class = {c.cls: c for c in dec.classes}
    assert (by_class["gemm"].a_us, by_class["gemm"].b_us) == (28, 14)
    assert by_class["gemm"].change == pytest.approx(-0.5)
    assert by_class["attention"].change == 0 and by_class["idle"].change == 0
    assert diffs["prefill"].change == 0
    lines = {x.phase: x for x in amdahl(a, ("gemm",), 2.0, {"decode": (dec.speedup, "t")})}
    x = lines["decode"]
    assert x.share == pytest.approx(56 / 82)  # GEMM over busy 74 + idle 8
    assert x.free == pytest.approx(82 / 26)
    assert x.at_factor == pytest.approx(82 / 54) == pytest.approx(x.measured)
    assert not x.exceeds and x.warning is None
    pre = lines["prefill"]
    assert (pre.share, pre.free, pre.at_factor) == (0.6, pytest.approx(2.5), pytest.approx(1 / 0.7))


def test_amdahl_warns_on_a_small_share_and_flags_a_measured_figure_above_the_bound(base_trace):
    p = analyse(read_trace(base_trace))
    lines = {x.phase: x for x in amdahl(p, ("attention",), 2.0, {"decode": (1.5, "given")})}
    x = lines["decode"]
    assert x.share == pytest.approx(12 / 82) and x.share < SMALL_SHARE
    assert x.warning.startswith("decode: the targeted classes are 15% of the phase's time")
    assert "the largest is GEMM/GEMV (68%)" in x.warning
    assert x.exceeds  # ×1.5 measured, ×1.17 at most
    assert lines["prefill"].warning is None  # 20 % of 100: not small


# -------------------------------------------------------------------- bad files


def _gz(tmp_path, name, data: bytes) -> Path:
    f = tmp_path / name
    f.write_bytes(data)
    return f


BAD = [
    ("cut.json.gz", gzip.compress(b'{"traceEvents": []}')[:20], "a damaged gzip file"),
    ("bad.json", b'{"traceEvents": [\n{"ph": "X",,}]}', "line 2, column 12: not valid JSON"),
    ("nolist.json", b'{"events": []}', "no 'traceEvents' list"),
    ("num.json", b"[1]", "traceEvents[0] is int '1', not an object"),
    (
        "ts.json",
        json.dumps([{"ph": "X", "cat": "kernel", "name": "k", "ts": "12", "dur": 1}]).encode(),
        "traceEvents[0] (k): field 'ts' is str '12', not a number",
    ),
    (
        "dur.json",
        json.dumps([{"ph": "X", "cat": "cpu_op", "name": "op", "ts": 1, "dur": -1}]).encode(),
        "traceEvents[0] (op): 'dur' < 0",
    ),
    (
        "name.json",
        json.dumps([{"ph": "X", "cat": "kernel", "name": 5, "ts": 1, "dur": 1}]).encode(),
        "traceEvents[0]: field 'name' is int '5'",
    ),
    ("fake.sqlite", b"SQLite format 3\x00" + b"\x00" * 200, "not a readable SQLite export"),
    ("bin.csv", b"\xff\xfe\x00garbage", "byte 0: not UTF-8 text"),
    ("other.csv", b"a,b,c\n1,2,3\n", "not a profile abtui reads"),
    (
        "sum.csv",
        b'"Time (%)","Total Time (ns)","Instances","Name"\n50.0,abc,2,gemm\n',
        "line 2: Total Time (ns) is 'abc', not a number",
    ),
    (
        "ncu.csv",
        b'"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
        b'"0","k","gpu__time_duration.sum","parsec","5"\n',
        "line 2: unit 'parsec' is not a time unit",
    ),
    ("r.nsys-rep", b"x", "a profiler's own report format"),
]


@pytest.mark.parametrize(("name", "data", "message"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_file_is_named_with_where(tmp_path, name, data, message):
    f = _gz(tmp_path, name, data)
    with pytest.raises(ProfileError) as e:
        read_trace(f)
    assert str(f) in e.value.message and message in e.value.message, e.value.message


def test_an_sqlite_file_without_kernels(tmp_path):
    f = tmp_path / "empty.sqlite"
    sqlite3.connect(f).execute(
        "CREATE TABLE StringIds (id INTEGER, value TEXT)"
    ).connection.commit()
    with pytest.raises(ProfileError, match="no CUPTI_ACTIVITY_KIND_KERNEL table"):
        read_trace(f)


def test_a_byte_order_mark_and_leading_space_are_fine(tmp_path):
    ks, anns = timeline()
    f = tmp_path / "bom.json"
    f.write_bytes(b"\xef\xbb\xbf \n" + json.dumps(chrome_trace(ks, annotations=anns)).encode())
    assert analyse(read_trace(f)).phases["decode"].steps == 2


def test_a_missing_file(tmp_path):
    with pytest.raises(ProfileError, match="cannot read it"):
        read_trace(tmp_path / "nope.json")


def test_default_table_has_the_documented_classes():
    assert DEFAULT.order == (
        "gemm",
        "attention",
        "norm_elementwise",
        "sampling",
        "communication",
        "memcpy",
        "other",
    )


# ------------------------------------------------------------ hostile documents

ODD = [None, [], {}, "x", -1, float("inf"), True, "\x1b[2J", 2**70, [1, 2], {"a": 1}]


def _read_or_refuse(path) -> None:
    """Reading either works or says why in a ProfileError: nothing else escapes."""
    try:
        analyse(read_trace(path))
    except ProfileError as e:
        assert str(path) in e.message


def test_mutated_chrome_traces_read_or_are_refused(tmp_path):
    rng = random.Random(7)
    ks, anns = timeline()
    for n in range(200):
        doc = chrome_trace(ks, annotations=anns)
        ev = rng.choice(doc["traceEvents"])
        key = rng.choice(["ph", "cat", "name", "ts", "dur", "args", "pid", "tid"])
        if key == "args" and isinstance(ev.get("args"), dict) and rng.random() < 0.5:
            ev["args"]["correlation"] = rng.choice(ODD)
        else:
            ev[key] = rng.choice(ODD)
        text = json.dumps(doc)  # inf is written as Infinity, which Python's json reads
        if n % 5 == 0:
            text = text[: rng.randrange(len(text))]
        f = tmp_path / f"m{n}.json"
        f.write_text(text)
        _read_or_refuse(f)


def test_mutated_nsys_exports_read_or_are_refused(tmp_path):
    rng = random.Random(11)
    ks, anns = timeline()
    columns = {
        "CUPTI_ACTIVITY_KIND_KERNEL": ["start", "end", "shortName", "correlationId", "globalPid"],
        "CUPTI_ACTIVITY_KIND_RUNTIME": ["start", "correlationId", "globalTid"],
        "NVTX_EVENTS": ["start", "end", "text", "textId"],
        "StringIds": ["value"],
    }
    good = write_nsys_sqlite(tmp_path / "good.sqlite", ks, anns)
    for n in range(40):
        f = tmp_path / f"m{n}.sqlite"
        shutil.copy(good, f)
        db = sqlite3.connect(f)
        db.execute("PRAGMA synchronous = OFF")
        table = rng.choice(list(columns))
        col = rng.choice(columns[table])
        value = rng.choice([None, "x", -5, 2**62, b"\x00\x01", 1.5])
        try:
            db.execute(f"UPDATE {table} SET {col} = ? WHERE rowid = 1", (value,))
        except sqlite3.IntegrityError:  # a NOT NULL column: the schema keeps that out
            pass
        db.commit()
        db.close()
        _read_or_refuse(f)


def test_mutated_csvs_read_or_are_refused(tmp_path):
    rng = random.Random(3)
    ks, _ = timeline()
    texts = [kern_sum_csv(ks), ncu_csv(LAUNCHES, "details"), ncu_csv(LAUNCHES, "raw")]
    for n in range(150):
        lines = rng.choice(texts).splitlines()
        i = rng.randrange(len(lines))
        cells = lines[i].split(",")
        cells[rng.randrange(len(cells))] = rng.choice(['"', "", "nan", "-1", '"1,0,0"', "\x00"])
        lines[i] = ",".join(cells)
        f = tmp_path / f"m{n}.csv"
        f.write_text("\n".join(lines))
        _read_or_refuse(f)


# ------------------------------------------------------------------- roofline


def test_vllm_detailed_counts():
    from abtui.profile.phases import vllm_counts

    c = vllm_counts("execute_8_context_0(sq0sk0sqsq0sqsk0)_generation_8(sq8sk8200sqsq8sqsk8200)")
    assert (c.generation_reqs, c.generation_seq_len, c.generation_pairs) == (8, 8200, 8200)
    c = vllm_counts(
        "execute_512_context_1(sq512sk512sqsq262144sqsk262144)_generation_0(sq0sk0sqsq0sqsk0)"
    )
    assert c.context_pairs == 512 * 513 / 2  # causal: n(n + 1)/2
    assert vllm_counts("execute_context_3(30)_generation_0(0)").context_seq_len is None


def test_roofline_cross_check_against_the_hardware_formulas(tmp_path):
    from abtui.hardware.gpus import get_gpu
    from abtui.hardware.models import get_model
    from abtui.hardware.roofline import decode_shape, prefill_shape, step_cost
    from abtui.hardware.roofline import streamed_weight_bytes as weights
    from abtui.profile.roofline import PEAK, roofline_checks

    gpu, model = get_gpu("h100-sxm"), get_model("llama-3-8b")
    gemv = weights(model, "bf16") / (0.8 * gpu.mem_bw) * 1e6  # µs: 80 % of peak bandwidth
    anns, ks = [Annotation(PREFILL, 0, 1e5)], [Kernel("sm90_xmma_gemm", 10, 9e4, launch=1)]
    for i in range(3):
        t0 = 2e5 + i * 1e5
        anns.append(Annotation("execute_context_0(0)_generation_8(8)", t0, gemv + 500))
        ks += [
            Kernel("gemv2T_kernel", t0 + 10, gemv, launch=t0 + 1),
            Kernel("paged_attention_v2_kernel", t0 + 10 + gemv, 300, launch=t0 + 2),
        ]
    p = analyse(read_trace(write_chrome(tmp_path / "t.json", chrome_trace(ks, annotations=anns))))
    checks = {c.phase: c for c in roofline_checks(p, gpu, model, "bf16", "bf16", 1024)}
    dec, pre = checks["decode"], checks["prefill"]
    assert dec.shape == decode_shape(8, 1024)
    assert pre.shape == prefill_shape(512)
    assert dec.floor_s == pytest.approx(
        step_cost(gpu, model, "bf16", "bf16", decode_shape(8, 1024), 1, PEAK).time
    )
    assert (dec.bound, pre.bound) == ("memory", "compute")
    assert dec.gemm_of_peak == pytest.approx(0.8)
    assert dec.measured_s == pytest.approx((gemv + 500) * 1e-6)
    assert dec.notes == []
    # prefill: 90 ms of GEMM for 512 tokens is far below an H100's peak; the phase is 90 % GEMM
    flops = 2 * model.linear_params() * 512 + 2 * model.lm_head_params()
    assert pre.gemm_rate == pytest.approx(flops / 0.09)
    assert pre.notes == []


def test_roofline_notes_a_mismatch_and_overheads(tmp_path):
    from abtui.hardware.gpus import get_gpu
    from abtui.hardware.models import get_model
    from abtui.profile.roofline import roofline_checks

    anns = [Annotation("execute_context_0(0)_generation_1(1)", 0, 100)]
    ks = [Kernel("gemv2T_kernel", 10, 20, launch=1), Kernel("rms_norm_kernel", 40, 50, launch=2)]
    p = analyse(read_trace(write_chrome(tmp_path / "t.json", chrome_trace(ks, annotations=anns))))
    [c] = roofline_checks(p, get_gpu("h100-sxm"), get_model("llama-3-8b"), "bf16", "bf16", 512)
    assert "do not match this trace" in c.notes[0]  # 15 GB in 20 µs
    assert "GEMM/GEMV and attention are 20% of its time (norm + elementwise leads)" in c.notes[1]


def test_no_amdahl_line_for_activity_outside_the_steps(base_trace):
    p = analyse(read_trace(base_trace))
    assert "unmarked" in p.phases
    assert [x.phase for x in amdahl(p, ("gemm",))] == ["prefill", "decode"]
