"""Expressions, programs and tracing, without a server: what `+`, `gen`, `select`, `bind`
and `trace` build, and that importing the DSL loads neither torch nor the runtime."""

import subprocess
import sys

import pytest

import lang as sgl
from lang.chat_template import ChatTemplate
from lang.ir import ConstantText, ExprList, Fork, Gen, RoleBegin, RoleEnd, Select
from lang.tracer import extract_prefix_by_tracing


class TemplateOnly(sgl.RuntimeEndpoint):
    """A backend that only knows a ChatML template (tracing needs nothing else)."""

    def __init__(self):
        self.chat_template = ChatTemplate(
            "chatml",
            {r: (f"<|im_start|>{r}\n", "<|im_end|>\n") for r in ("system", "user", "assistant")},
        )


def test_importing_lang_loads_no_torch_and_no_runtime():
    code = (
        "import sys, lang as sgl; "
        "assert 'torch' not in sys.modules, 'torch'; "
        "assert not [m for m in sys.modules if m.split('.')[0] == 'runtime'], 'runtime'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_plus_builds_flat_expression_lists():
    expr = "Q: " + sgl.gen("a") + "\n" + sgl.user("hi")
    assert isinstance(expr, ExprList)
    kinds = [type(item) for item in expr.items]
    assert kinds == [ConstantText, Gen, ConstantText, RoleBegin, ConstantText, RoleEnd]


def test_gen_options_and_shorthands():
    g = sgl.gen("x", max_tokens=5, min_tokens=2, stop=["\n"], json_schema={"type": "object"})
    assert (g.params.max_new_tokens, g.params.min_new_tokens) == (5, 2)
    assert g.params.json_schema == '{"type": "object"}'
    assert sgl.gen_int("n").params.dtype == "int"
    assert sgl.gen_string("s").params.dtype == "str"
    picked = sgl.gen("c", choices=["a", "b"], choices_method=sgl.greedy_token_selection)
    assert isinstance(picked, Select) and picked.choices_method is sgl.greedy_token_selection
    with pytest.raises(ValueError, match="dtype"):
        sgl.gen("bad", dtype=list)
    with pytest.raises(Exception, match="unterminated|missing"):
        sgl.gen("bad", regex="(")
    with pytest.raises(ValueError, match="choices"):
        sgl.select("empty", choices=[])


def test_function_decorator_forms_and_bind():
    @sgl.function(num_api_spec_tokens=64)
    def program(s, topic, style="short"):
        s += topic + style

    assert program.arg_names == ["topic", "style"]
    bound = program.bind(style="long")
    assert bound.bind_arguments == {"style": "long"}
    with pytest.raises(TypeError, match="no arguments"):
        program.bind(colour="red")


def test_trace_records_roles_arguments_generations_and_forks():
    @sgl.function
    def program(s, question):
        s += sgl.system("Be brief.")
        s += sgl.user(question)
        s += sgl.assistant(sgl.gen("answer", max_tokens=8))
        forks = s.fork(2)
        forks += sgl.gen("more")
        forks.join()

    traced = program.trace(backend=TemplateOnly())
    nodes = traced.flatten_nodes()
    assert [n.value for n in nodes[:3]] == ["<|im_start|>system\n", "Be brief.", "<|im_end|>\n"]
    assert any(isinstance(n, Gen) and n.name == "answer" for n in nodes)
    assert isinstance(nodes[-1], Fork) and nodes[-1].size == 2
    assert len(traced.child_states) == 2


def test_constant_prefix_stops_at_the_first_argument():
    @sgl.function
    def program(s, question):
        s += sgl.system("You answer questions about tools. " * 3)
        s += sgl.user(f"Question: {question}")  # an f-string ends the trace here

    prefix = extract_prefix_by_tracing(program, TemplateOnly())
    assert prefix == "<|im_start|>system\n" + "You answer questions about tools. " * 3 + (
        "<|im_end|>\n"
    )


def test_running_without_a_backend_says_how_to_set_one():
    @sgl.function
    def program(s):
        s += "x"

    sgl.set_default_backend(None)
    with pytest.raises(ValueError, match="set_default_backend"):
        program.run()
