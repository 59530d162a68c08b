"""Programs against a real server with SmolLM2 (structure, not world knowledge, except
"Paris"): generation options, constraints, roles, reads inside programs, run_batch."""

import ast
import json
import operator
import re
import uuid

import httpx
import jsonschema
import pytest

import lang as sgl

IPV4 = r"((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])"


@sgl.function
def few_shot_qa(s, question):
    s += "Q: What is the capital of Germany?\nA: Berlin\n"
    s += "Q: What is the capital of Italy?\nA: Rome\n"
    s += "Q: " + question + "\nA:"
    s += sgl.gen("answer", stop="\n", max_tokens=12, temperature=0)


def test_few_shot_qa_stops_at_the_stop_string(backend):
    state = few_shot_qa.run(question="What is the capital of France?")
    assert "Paris" in state["answer"]
    assert "\n" not in state["answer"]
    assert state.text().endswith(state["answer"])
    meta = state.get_meta_info("answer")
    assert meta["prompt_tokens"] > 20 and meta["completion_tokens"] >= 1


def test_run_batch_returns_states_in_input_order_and_precaches_the_prefix(backend):
    head = f"Session {uuid.uuid4().hex}. " + "You label things. " * 20  # new to the cache

    @sgl.function
    def tagged(s, tag):
        s += head  # a constant prefix: run_batch caches it before the programs start
        s += "Label: " + tag + "\nNext:"
        s += sgl.gen("next", max_tokens=2, temperature=0)

    tags = [f"item-{i}-{uuid.uuid4().hex[:6]}" for i in range(4)]
    states = tagged.run_batch([{"tag": t} for t in tags], num_threads=4, progress_bar=True)
    assert [s.text().split("Label: ")[1].split("\n")[0] for s in states] == tags
    prefix_tokens = backend.generate_raw({"text": head, "sampling_params": {"max_new_tokens": 0}})[
        "meta_info"
    ]["prompt_tokens"]
    # every program, even the first ones to arrive, found the traced prefix in the cache
    assert all(s.get_meta_info("next")["cached_tokens"] >= prefix_tokens - 1 for s in states)
    assert tagged.run_batch([("only",)], num_threads=1)[0].text().count("Label: only") == 1


def test_roles_render_the_served_template_and_messages_list_them(backend):
    @sgl.function
    def chat(s):
        s += sgl.system("You are terse.")
        s += sgl.user("Say hello.")
        s += sgl.assistant(sgl.gen("hello", max_tokens=6, temperature=0))
        with s.user():
            s += "Now say bye."
        s += sgl.assistant_begin() + sgl.gen("bye", max_tokens=6, temperature=0)
        s += sgl.assistant_end()

    state = chat.run()
    roles = [m["role"] for m in state.messages()]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    assert state.messages()[3]["content"] == "Now say bye."
    assert state.messages()[4]["content"] == state["bye"].strip()
    assert state.text().startswith("<|im_start|>system\nYou are terse.<|im_end|>\n")
    assert "<|im_start|>user\nNow say bye.<|im_end|>\n<|im_start|>assistant\n" in state.text()

    @sgl.function
    def no_system(s):
        s += sgl.user("Hi")

    first = no_system.run().messages()[0]  # the template's own default system prompt
    assert first["role"] == "system" and first["content"] == (
        backend.get_chat_template().default_system_prompt
    )


def direct_scores(url: str, prefix: str, choices: list[str]) -> list[float]:
    """Mean logprob of each choice's tokens after `prefix`, straight from /generate."""
    head = httpx.post(
        url + "/generate", json={"text": prefix, "sampling_params": {"max_new_tokens": 0}}
    ).json()
    scores = []
    for choice in choices:
        out = httpx.post(
            url + "/generate",
            json={
                "text": prefix + choice,
                "sampling_params": {"max_new_tokens": 0},
                "return_logprob": True,
                "logprob_start_len": head["meta_info"]["prompt_tokens"],
            },
        ).json()
        values = [entry[0] for entry in out["meta_info"]["input_token_logprobs"]]
        scores.append(sum(values) / len(values))
    return scores


def test_select_agrees_with_normalized_logprobs_from_generate(backend):
    choices = [" apple", " car", " blue sky"]

    @sgl.function
    def pick(s, method):
        s += "Q: Which of these is a fruit?\nA:"
        s += sgl.select("pick", choices=choices, choices_method=method)

    state = pick.run(method=sgl.token_length_normalized)
    prefix = state.text()[: -len(state["pick"])]
    scores = direct_scores(backend.base_url, prefix, choices)
    assert state["pick"] == choices[scores.index(max(scores))]
    meta = state.get_meta_info("pick")  # batched and cached: equal up to float noise
    assert meta["normalized_prompt_logprobs"] == pytest.approx(scores, abs=0.15)
    for method in (sgl.greedy_token_selection, sgl.unconditional_likelihood_normalized):
        assert pick.run(method=method)["pick"] in choices


def test_typed_generations_parse(backend):
    @sgl.function
    def typed(s):
        s += "2 + 2 = 4\n3 + 3 = 6\n4 + 4 = "
        s += sgl.gen_int("sum", max_tokens=4, temperature=0)
        s += "\nHalf of 3 is "
        s += sgl.gen("half", dtype=float, max_tokens=6, temperature=0)
        s += "\nIs water wet (True/False)? "
        s += sgl.gen("wet", dtype=bool, max_tokens=3, temperature=0)
        s += "\nA name in quotes: "
        s += sgl.gen_string("name", max_tokens=10, temperature=0)

    state = typed.run()
    int(state["sum"])
    float(state["half"])
    assert state["wet"] in ("True", "False")
    assert re.fullmatch(r'"[^"]*"', state["name"]) or len(state["name"]) >= 9


def test_regex_output_is_a_full_ipv4_match(backend):
    @sgl.function
    def address(s):
        s += "The router's IP address is "
        s += sgl.gen("ip", regex=IPV4, max_tokens=16, temperature=0)

    assert re.fullmatch(IPV4, address.run()["ip"])


def test_json_schema_output_validates(backend):
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 12},
            "population": {"type": "integer", "minimum": 0, "maximum": 99999999},
        },
        "required": ["city", "population"],
        "additionalProperties": False,
    }

    @sgl.function
    def extract(s):
        s += sgl.user("Paris has about 2100000 people. Give the city and population as JSON.")
        s += sgl.assistant(sgl.gen("json", json_schema=json.dumps(schema), max_tokens=40))

    data = json.loads(extract.run(temperature=0)["json"])
    jsonschema.validate(data, schema)


def test_a_value_read_inside_the_program_feeds_the_next_prompt(backend):
    @sgl.function
    def reuse(s):
        s += "Pick a number from 1 to 9: " + sgl.gen_int("n", max_tokens=2, temperature=0)
        doubled = 2 * int(s["n"])  # blocks until the generation above is done
        s += f"\nTwice that is {doubled}. " + sgl.gen("more", max_tokens=2, temperature=0)
        s["doubled"] = doubled
        return doubled

    state = reuse.run()
    assert f"Twice that is {2 * int(state['n'])}." in state.text()
    assert state.ret_value == state["doubled"] == 2 * int(state["n"])
    assert "doubled" in state


def test_var_scope_captures_the_text_appended_inside(backend):
    @sgl.function
    def scoped(s):
        s += "Before. "
        with s.var_scope("middle"):
            s += "Inside: " + sgl.gen("g", max_tokens=3, temperature=0)
        s += " After."

    state = scoped.run()
    assert state["middle"] == "Inside: " + state["g"]
    assert state.text() == "Before. " + state["middle"] + " After."


def calculate(expression: str) -> int:
    """Evaluate integer + - * arithmetic (the tool the model calls)."""
    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}

    def value(node):
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        raise ValueError(f"not arithmetic: {expression}")

    return value(ast.parse(expression, mode="eval").body)


def test_tool_use_loop_feeds_a_python_result_back(backend):
    @sgl.function
    def tool_use(s, question):
        s += sgl.system("Write arithmetic for the calculator, then answer with its result.")
        s += sgl.user(question)
        s += sgl.assistant(
            "calc(" + sgl.gen("expr", regex=r"[1-9][0-9]? [+*-] [1-9][0-9]?", max_tokens=8) + ")"
        )
        result = calculate(s["expr"])
        s += sgl.user(f"calculator result: {result}")
        s += sgl.assistant("The answer is " + sgl.gen_int("answer", max_tokens=6))
        return result

    state = tool_use.run(question="What is 12 times 3?", temperature=0)
    assert state.ret_value == calculate(state["expr"])
    assert f"calculator result: {state.ret_value}" in state.text()
    int(state["answer"])


def test_react_loop_driven_by_select(backend):
    actions = ["search", "calculate", "finish"]

    @sgl.function
    def react(s, question, max_steps=3):
        s += "Answer by choosing actions. Actions: search, calculate, finish.\n"
        s += f"Question: {question}\n"
        for step in range(max_steps):
            s += f"Action {step}: " + sgl.select(f"action_{step}", choices=actions)
            if s[f"action_{step}"] == "finish":
                break
            s += "\nInput: " + sgl.gen(f"input_{step}", max_tokens=6, stop="\n")
            s += f"\nObservation: {s[f'input_{step}'].strip()[:20]!r} done.\n"
        return step + 1

    state = react.run(question="How tall is the Eiffel tower?", temperature=0)
    taken = [state[f"action_{i}"] for i in range(state.ret_value)]
    assert all(a in actions for a in taken)
    assert state.ret_value == 3 or taken[-1] == "finish"
    assert state.text().count("Action ") == state.ret_value


def test_min_tokens_keeps_generating_past_an_early_end(backend):
    @sgl.function
    def short(s, min_tokens):
        s += sgl.user("Reply with one word: yes or no?")
        s += sgl.assistant(sgl.gen("a", max_tokens=8, min_tokens=min_tokens, temperature=0))

    free = short.run(min_tokens=None).get_meta_info("a")["completion_tokens"]
    forced = short.run(min_tokens=6).get_meta_info("a")["completion_tokens"]
    assert free < 6 <= forced


def test_errors_name_their_cause(backend):
    @sgl.function
    def picture(s):
        s += sgl.user(sgl.image("cat.png") + "What is this?")

    with pytest.raises(sgl.UnsupportedFeatureError, match="image"):
        picture.run()

    @sgl.function
    def impossible(s):
        s += sgl.gen("x", json_schema={"type": "object", "patternProperties": {"a": {}}})

    with pytest.raises(sgl.BackendError, match="400") as error:
        impossible.run()
    assert error.value.status == 400
    states = impossible.run_batch([{}, {}])  # a batch keeps going and keeps the error
    assert all(isinstance(s.error(), sgl.BackendError) for s in states)
