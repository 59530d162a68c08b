"""Fork/join against a real server (the shared prefix is committed once and reused by every
branch) and streaming (pieces join to the final text)."""

import asyncio
import uuid

import lang as sgl


def prefix_tokens(backend, text: str) -> int:
    out = backend.generate_raw({"text": text, "sampling_params": {"max_new_tokens": 0}})
    return out["meta_info"]["prompt_tokens"]


def test_fork_branches_reuse_the_committed_prefix(backend):
    topic = f"Project {uuid.uuid4().hex}: " + "a garden robot that waters plants. " * 12

    @sgl.function
    def brainstorm(s):
        s += sgl.system("You brainstorm. " + topic)
        forks = s.fork(3)
        for i, f in enumerate(forks):
            f += sgl.user(f"Idea {i}:") + sgl.assistant(sgl.gen("idea", max_tokens=4))
        forks.join()
        return forks

    state = brainstorm.run(temperature=0)
    shared = prefix_tokens(backend, state.text())  # the text before the fork
    ideas, metas = state["idea"], state.get_meta_info("idea")
    assert isinstance(ideas, list) and len(ideas) == 3 and len(metas) == 3
    for i, meta in enumerate(metas):
        assert meta["cached_tokens"] >= shared - 1, (i, meta, shared)
        assert meta["prompt_tokens"] > shared
    branch = state.ret_value[1]
    assert branch.text().startswith(state.text()) and "Idea 1:" in branch.text()
    assert branch.get_meta_info("idea") == metas[1]


def test_concate_and_append_keeps_every_branch_in_order(backend):
    @sgl.function
    def collect(s):
        s += "Three colours:"
        forks = s.fork(3)
        forks += lambda i: f" ({i}) " + sgl.gen("colour", max_tokens=2, temperature=0)
        forks.join(mode="concate_and_append")
        return [f["colour"] for f in forks]

    state = collect.run()
    expected = "".join(f" ({i}) {c}" for i, c in enumerate(state.ret_value))
    assert state.text() == "Three colours:" + expected


def test_fork_takes_a_list_of_expressions_and_joins_gathered_values(backend):
    @sgl.function
    def pair(s):
        s += "Word:"
        forks = s.fork(2)
        forks += [" cat " + sgl.gen("w", max_tokens=1), " dog " + sgl.gen("w", max_tokens=1)]
        forks.join()

    state = pair.run(temperature=0)
    assert len(state["w"]) == 2 and state.text() == "Word:"


@sgl.function
def chat_once(s):
    s += sgl.user("Say hi.")
    s += sgl.assistant(sgl.gen("reply", max_tokens=8, temperature=0))
    s += sgl.user("Bye.")


def test_streamed_pieces_join_to_the_final_text(backend):
    state = chat_once.run(stream=True)
    pieces = list(state.text_iter())
    assert len(pieces) > 2 and "".join(pieces) == state.text()

    state = chat_once.run(stream=True)
    reply = list(state.text_iter("reply"))
    assert len(reply) > 1 and "".join(reply) == state["reply"]
    assert state.get_meta_info("reply")["completion_tokens"] >= len(reply) - 1

    async def collect():
        streamed = chat_once.run(stream=True)
        return streamed, [piece async for piece in streamed.text_async_iter("reply")]

    streamed, pieces = asyncio.run(collect())
    assert "".join(pieces) == streamed["reply"]


def test_text_iter_without_streaming_yields_the_whole_text(backend):
    state = chat_once.run()
    assert list(state.text_iter()) == [state.text()]
    assert list(state.text_iter("reply")) == [state["reply"]]
