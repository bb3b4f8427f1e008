"""``workload.task``: real instructions (repeat a paragraph / write a story) instead of common
words, for optimisations whose gain depends on what the model writes (abtui.workload.tasks)."""

from __future__ import annotations

import re

import pytest

from abtui.errors import SpecError
from abtui.spec import spec_from_dict, validate
from abtui.workload.build import build_items
from abtui.workload.tasks import REPEAT_INSTRUCTION, paragraph, task_prompt

ARMS = [
    {"name": "a", "url": "http://127.0.0.1:1/v1"},
    {"name": "b", "url": "http://127.0.0.1:2/v1"},
]


def _spec(workload: dict, source: str = "x.toml"):
    return validate(
        spec_from_dict(
            {"arms": [dict(a) for a in ARMS], "workload": workload, "load": {"concurrency": 1}},
            source,
        )
    )


def test_repeat_items_carry_a_paragraph_of_the_asked_length_the_same_for_every_build():
    spec = _spec({"task": "repeat", "requests": 6, "input_tokens": 80, "output_tokens": 96})
    items = build_items(spec, None)
    assert items == build_items(spec, None)  # same spec, same items (every arm, every rerun)
    texts = []
    for it in items:
        head, _, body = it.prompt.partition("\n\n")
        assert head == REPEAT_INSTRUCTION and it.max_tokens == 96
        assert 80 <= len(body.split()) < 80 + 25  # whole sentences up to the length
        assert re.fullmatch(r"([A-Z][a-z' ,]+\.)( [A-Z][a-z' ,]+\.)*", body), body
        assert it.n_input == len(it.prompt.split())
        texts.append(body)
    assert len(set(texts)) == 6  # every item its own paragraph
    # another seed, other paragraphs
    other = build_items(
        _spec({"task": "repeat", "requests": 6, "input_tokens": 80, "seed": 1}), None
    )
    assert not {it.prompt for it in other} & {it.prompt for it in items}


def test_story_items_are_short_open_instructions():
    items = build_items(_spec({"task": "story", "requests": 20, "input_tokens": 512}), None)
    for it in items:
        assert it.prompt.startswith("Write a short story about ") and it.prompt.endswith(".")
        assert len(it.prompt.split()) < 25  # the instruction's own length, not input_tokens
    assert len({it.prompt for it in items}) >= 18


def test_an_item_is_the_same_whichever_others_are_made():
    assert task_prompt("repeat", 3, "i7", 50) == task_prompt("repeat", 3, "i7", 50)
    assert task_prompt("repeat", 3, "i7", 50) != task_prompt("repeat", 3, "i8", 50)
    import random

    assert len(paragraph(random.Random(0), 1).split(". ")) == 1  # at least one sentence


@pytest.mark.parametrize(
    "workload, says",
    [
        ({"task": "summarise"}, r"workload.task must be one of repeat, story, got 'summarise'"),
        ({"task": "repeat", "prefix_groups": 2, "prefix_tokens": 8}, "makes its own prompts"),
        ({"task": 3}, "workload.task must be"),
    ],
)
def test_a_bad_task_is_named(workload, says):
    with pytest.raises(SpecError, match=says):
        _spec(workload)


def test_the_warm_up_asks_the_same_kind_of_question():
    """A server warmed on common words would meet the task's prompts cold (and an n-gram
    drafter's counters would mix the two kinds)."""
    from abtui.runner.schedule import warmup_items

    spec = _spec({"task": "repeat", "requests": 3, "input_tokens": 40})
    warm = warmup_items(spec, 3)
    assert [it.id for it in warm] == ["warmup0", "warmup1"]
    assert all(it.prompt.startswith(REPEAT_INSTRUCTION) for it in warm)
    assert not {it.prompt for it in warm} & {it.prompt for it in build_items(spec, None)}
    plain = warmup_items(_spec({"requests": 3, "input_tokens": 40}), 3)
    assert all(it.prompt.startswith(f"warmup {k} ") for k, it in enumerate(plain))
