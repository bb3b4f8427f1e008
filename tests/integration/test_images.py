"""Images in prompts: PNGs made locally, sent as chat content parts to the simulator over
loopback (which charges their vision tokens), their sizes stored per item, and a workload
file's image parts checked as it is read."""

from __future__ import annotations

import asyncio
import json
import re
import struct
import time
import zlib

import duckdb
import numpy as np
import pytest

from abtui.cli import main
from abtui.client import images as im
from abtui.client.fast import FastClient, fast_stream_request
from abtui.client.items import Item
from abtui.client.records import RequestRecord
from abtui.client.stream import Target, build_body
from abtui.metrics import request as rm
from abtui.metrics.table import RequestTable
from abtui.sim.engine import SimConfig
from abtui.sim.process import SimProcess
from abtui.sim.server import start_server
from abtui.sim.vision import vision_tokens
from abtui.store.reader import SessionReader

# serial: TTFT with and without images, a few ms apart
pytestmark = pytest.mark.serial


def _pixels(png: bytes) -> np.ndarray:
    """Decode one of abtui's PNGs (8-bit RGB, no filter) back to pixels: every chunk's CRC and
    the stream's Adler-32 are checked on the way (zlib.decompress)."""
    assert png.startswith(im.PNG_MAGIC)
    i, idat, ihdr = 8, b"", None
    while i < len(png):
        (n,) = struct.unpack(">I", png[i : i + 4])
        kind, data = png[i + 4 : i + 8], png[i + 8 : i + 8 + n]
        assert zlib.crc32(kind + data) == struct.unpack(">I", png[i + 8 + n : i + 12 + n])[0]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", data)
        elif kind == b"IDAT":
            idat += data
        i += 12 + n
    w, h, depth, color, *_ = ihdr
    assert (depth, color) == (8, 2)
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, 1 + 3 * w)
    assert (raw[:, 0] == 0).all()
    return raw[:, 1:].reshape(h, w, 3)


@pytest.mark.parametrize("size", [(512, 512), (300, 200), (7, 3), (1, 1), (33, 40)])
def test_made_pngs_decode_and_differ_by_seed(size):
    w, h = size
    a, b = im.png_bytes(w, h, 1), im.png_bytes(w, h, 2)
    assert a == im.png_bytes(w, h, 1)  # deterministic
    pa, pb = _pixels(a), _pixels(b)
    assert pa.shape == (h, w, 3) and (pa != pb).any()  # own pixels: no cache reuses one
    assert im.image_size(a) == ("png", w, h)
    assert im.describe(a)["bytes"] == len(a)


def test_headers_of_other_formats_and_bad_urls():
    jpeg = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    jpeg += b"\xff\xc0\x00\x11\x08\x01\xe0\x02\x80\x03" + b"\x00" * 9  # SOF0: 480 × 640
    assert im.image_size(jpeg) == ("jpeg", 640, 480)
    assert im.image_size(b"GIF89a" + struct.pack("<HH", 20, 10) + b"\x00" * 8)[1:] == (20, 10)
    vp8x = b"RIFF\x00\x00\x00\x00WEBPVP8X" + b"\x00" * 8 + (99).to_bytes(3, "little")
    assert im.image_size(vp8x + (49).to_bytes(3, "little")) == ("webp", 100, 50)
    for url, says in [
        ("https://example.invalid/cat.png", "only data: URLs"),
        ("data:image/png;base64,not*base64", "not valid base64"),
        ("data:text/plain;base64,aGk=", "is not image/"),
        (im.data_url(b"just some text"), "not a PNG, JPEG, GIF or WebP"),
    ]:
        with pytest.raises(im.NotAnImage, match=says):
            im.image_size(im.decode_data_url(url))


def test_vision_tokens_follow_qwen2_vl():
    assert vision_tokens(512, 512) == 324  # 504 × 504 after rounding to 28s
    assert vision_tokens(1024, 768) == 999  # 1036 × 756: 37 × 27 squares
    assert vision_tokens(1, 1) == 4  # raised to the minimum of 56 × 56
    assert vision_tokens(16384, 16384) <= 16384  # capped at MAX_PIXELS


async def _send(images: int, n: int = 6) -> list[RequestRecord]:
    """``n`` chat requests with the same text and ``images`` made 512×512 images each."""
    sim = await start_server(SimConfig(port=0, ttft_ms=4.0, itl_ms=2.0))
    try:
        tgt = Target(base_url=sim.url, model="sim-model", api="chat")
        out = []
        async with FastClient() as client:
            for i in range(n):
                pics = im.made_images(0, i, images, [(512, 512)]) if images else None
                it = Item(index=i, id=f"i{i}", prompt="describe it", max_tokens=3, images=pics)
                rec = RequestRecord(arm=0, item=i, scheduled_ns=time.perf_counter_ns())
                out.append(await fast_stream_request(client, tgt, it, build_body(tgt, it), rec))
        return out
    finally:
        await sim.close()


def test_images_raise_ttft_by_their_vision_tokens():
    """Two 512×512 images are 648 vision tokens: the sim's usage counts them in the prompt and
    its first chunk waits 25 µs for each (16.2 ms) on top of its 4 ms."""
    plain, pics = asyncio.run(_send(0)), asyncio.run(_send(2))
    assert {r.status for r in plain + pics} == {"ok"}
    assert {r.n_input for r in plain} == {2} and {r.n_input for r in pics} == {2 + 648}
    t0 = rm.ttft_s(RequestTable.from_records(plain))
    t2 = rm.ttft_s(RequestTable.from_records(pics))
    # the server cannot answer before its delay: a floor whatever the load
    assert (t2 >= 0.004 + 0.0162).all() and np.median(t2) > np.median(t0) + 0.010


def test_the_sim_refuses_a_bad_image():
    async def go():
        sim = await start_server(SimConfig(port=0, ttft_ms=1.0, itl_ms=1.0))
        try:
            tgt = Target(base_url=sim.url, model="sim-model", api="chat")
            bad = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
            msgs = [{"role": "user", "content": [{"type": "text", "text": "x"}, bad]}]
            it = Item(index=0, id="bad", messages=msgs, max_tokens=2)
            rec = RequestRecord(arm=0, item=0, scheduled_ns=time.perf_counter_ns())
            async with FastClient() as client:
                return await fast_stream_request(client, tgt, it, build_body(tgt, it), rec)
        finally:
            await sim.close()

    rec = asyncio.run(go())
    assert rec.status == "error" and rec.http_status == 400
    assert "messages[0].content[1].image_url.url" in rec.error_message


@pytest.fixture(scope="module")
def sims():
    with (
        SimProcess(SimConfig(ttft_ms=3, itl_ms=1, model="sim-a", seed=1)) as a,
        SimProcess(SimConfig(ttft_ms=3, itl_ms=1, model="sim-b", seed=2)) as b,
    ):
        yield a, b


def _run(sims, tmp_path, name: str, *extra: str) -> int:
    return main(
        ["run", "--baseline", sims[0].url, "--candidate", sims[1].url, "--api", "chat"]
        + ["--requests", "12", "--rate", "40", "--input-tokens", "8", "--output-tokens", "2"]
        + ["--warmup", "1", "--headless", "--name", name, "--sessions-dir", str(tmp_path)]
        + list(extra)
    )


def test_made_images_are_sent_stored_and_shown(sims, tmp_path, capsys):
    """Each prompt's images, as stored, are what the sim received: its prompt tokens are the
    text's 8 plus the vision tokens of the stored sizes. Their bytes are in no stored message
    and on no terminal line; the workload line states them."""
    rc = _run(
        sims, tmp_path, "pics", "--images-per-request", "2", "--image-size", "256x256,512x512"
    )
    out = capsys.readouterr()
    assert rc in (0, 3, 4)
    with SessionReader(tmp_path / "pics.duckdb") as rd:
        items = {it.index: it for it in rd.items()}
        t = rd.request_table()
        stored = rd.item_images()
    ok = t.ok & ~t.warmup
    assert ok.sum() == 24 and len(stored) == 12
    warm = [it for it in items.values() if "warmup" in it.tags]
    assert warm and all(len(it.images) == 2 for it in warm)  # the vision path warms too
    ok = t.ok  # the warm-up's prompt tokens are its images' too
    sizes = set()
    for i, n_in in zip(t.item[ok], t.n_input[ok], strict=True):
        pics = items[int(i)].images
        assert len(pics) == 2
        assert n_in == 8 + sum(vision_tokens(p["width"], p["height"]) for p in pics)
        for p in pics:  # made again from the stored seed: the same bytes
            png = im.png_bytes(p["width"], p["height"], p["seed"])
            assert im.describe(png) == {k: v for k, v in p.items() if k != "seed"}
            sizes.add((p["width"], p["height"]))
    assert sizes == {(256, 256), (512, 512)}
    con = duckdb.connect(str(tmp_path / "pics.duckdb"), read_only=True)
    assert not con.execute("SELECT count(*) FROM items WHERE messages LIKE '%base64%'").fetchone()[
        0
    ]
    con.close()
    assert "base64" not in out.out + out.err
    assert "images 24 in 12 of 12 prompts (" in " ".join(out.out.split())


def _line(text: str, url: str) -> dict:
    part = {"type": "image_url", "image_url": {"url": url}}
    return {"messages": [{"role": "user", "content": [{"type": "text", "text": text}, part]}]}


def test_a_workload_files_images_are_replayed_and_stored(sims, tmp_path, capsys):
    png = im.png_bytes(300, 200, 5)
    wl = tmp_path / "wl.jsonl"
    wl.write_text("\n".join(json.dumps(_line(f"what is {k}", im.data_url(png))) for k in "ab"))
    assert _run(sims, tmp_path, "file", "--workload", str(wl)) in (0, 3, 4)
    out = capsys.readouterr().out
    with SessionReader(tmp_path / "file.duckdb") as rd:
        items = [it for it in rd.items() if "warmup" not in it.tags]
        t = rd.request_table()
    assert [it.images for it in items] == [[im.describe(png)]] * 2
    stand_in = items[0].messages[0]["content"][1]["image_url"]["url"]
    assert stand_in == "<image 0: png 300x200, " + f"{len(png):,} bytes>"
    # 3 words and 77 vision tokens (308 × 196 after rounding: 22 × 14 patches / 4)
    assert set(t.n_input[t.ok & ~t.warmup]) == {3 + 77}
    assert "images 2 in 2 of 2 prompts (300x200 ×2" in " ".join(out.split())


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("data:image/png;base64,iVBORw0KGgo!!!", "not valid base64"),
        (im.data_url(b"%PDF-1.7 not an image"), "not a PNG, JPEG, GIF or WebP image"),
        ("http://127.0.0.1:9/cat.png", "only data: URLs"),
    ],
)
def test_a_bad_image_in_a_workload_file_is_a_clean_error(sims, tmp_path, capsys, url, says):
    wl = tmp_path / "bad.jsonl"
    good = json.dumps(_line("fine", im.data_url(im.png_bytes(8, 8, 1))))
    wl.write_text(good + "\n" + json.dumps(_line("broken", url)) + "\n")
    assert _run(sims, tmp_path, "bad", "--workload", str(wl)) == 2
    err = capsys.readouterr().err
    assert f"{wl}:2: messages[0].content[1].image_url.url: " in err and says in err
    assert "Traceback" not in err and "iVBOR" not in err


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--api", "completions", "--images-per-request", "1"], "images are sent in chat"),
        (["--images-per-request", "1", "--image-size", "512by512"], "workload.image_size"),
        (["--images-per-request", "1", "--image-size", "0x10"], "1 … 16384"),
    ],
)
def test_bad_image_options_are_one_line_errors(sims, tmp_path, capsys, extra, says):
    assert _run(sims, tmp_path, "opt", *extra) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_a_file_without_the_images_column_reads(sims, tmp_path):
    assert _run(sims, tmp_path, "old", "--images-per-request", "1") in (0, 3, 4)
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE items DROP COLUMN images")
    con.close()
    with SessionReader(path) as rd:
        assert rd.item_images() == [] and all(it.images is None for it in rd.items())


def test_sim_option_round_trips():
    from abtui.sim.cli_args import config_to_argv

    argv = config_to_argv(SimConfig(vision_us_per_token=7.5))
    assert argv[argv.index("--vision-us-per-token") + 1] == "7.5"
    assert "--vision-us-per-token" not in config_to_argv(SimConfig())
    with pytest.raises(Exception, match="--vision-us-per-token"):
        SimConfig(vision_us_per_token=-1.0).validate()


def test_made_images_with_a_conversation_file_are_refused(sims, tmp_path, capsys):
    conv = tmp_path / "c.jsonl"
    turn = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    conv.write_text(json.dumps({"id": "c1", "arrival_s": 0.0, "turns": [turn]}) + "\n")
    extra = ("--conversations", str(conv), "--images-per-request", "1")
    assert _run(sims, tmp_path, "conv", *extra) == 2
    err = capsys.readouterr().err
    assert "images_per_request makes images for synthetic prompts" in err


def test_synth_writes_the_images_run_makes_and_a_run_of_the_file_sends_them(sims, tmp_path, capsys):
    """``abtui workload synth --images-per-request`` writes each prompt's made images into
    the file as chat content parts; ``abtui run --workload`` of it stores those images (sizes,
    digests), which are the ones ``abtui run`` makes itself with the same options."""
    wl = tmp_path / "syn.jsonl"
    opts = ["--images-per-request", "2", "--image-size", "64x32,128x128", "--seed", "7"]
    shape = ["--requests", "12", "--input-tokens", "8", "--output-tokens", "2"]
    assert main(["workload", "synth", "-o", str(wl), *shape, *opts]) == 0
    written = []
    for line in wl.read_text().splitlines():
        rec = json.loads(line)
        urls = im.image_urls(rec["messages"])
        assert rec["messages"][0]["content"][0]["type"] == "text" and len(urls) == 2
        written.append([im.describe(im.decode_data_url(u)) for u in urls])
    assert len(written) == 12
    assert {(d["width"], d["height"]) for pics in written for d in pics} == {(64, 32), (128, 128)}
    capsys.readouterr()
    assert main(["workload", "inspect", str(wl)]) == 0  # the prompts' words, not the images'
    assert re.search(r"^\s*input\s+8\s+8\s+8\s+8\s", capsys.readouterr().out, re.M)

    assert _run(sims, tmp_path, "fromfile", "--workload", str(wl)) in (0, 3, 4)
    assert _run(sims, tmp_path, "made", *opts) in (0, 3, 4)
    capsys.readouterr()
    for name in ("fromfile", "made"):
        with SessionReader(tmp_path / f"{name}.duckdb") as rd:
            items = sorted(
                (it for it in rd.items() if "warmup" not in it.tags), key=lambda it: it.index
            )
            t = rd.request_table()
        assert t.ok[~t.warmup].sum() == 24, name  # the sim took every image
        got = [[{k: v for k, v in d.items() if k != "seed"} for d in it.images] for it in items]
        assert got == written, name
