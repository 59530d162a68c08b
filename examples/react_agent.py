"""A ReAct agent: the model calls tools with JSON that a schema guarantees, a Python tool
computes the observation, and the loop goes on until the model gives its final answer.

    python -m runtime.launch_server --model-path smollm2 --port 30000   # in another shell
    python examples/react_agent.py --question "What is 17 * 23?"
"""

import argparse
import ast
import json
import operator

import lang as sgl

TOOL_CALL = {
    "type": "object",
    "properties": {
        "tool": {"enum": ["calculator", "final_answer"]},
        "input": {"type": "string", "maxLength": 40},
    },
    "required": ["tool", "input"],
    "additionalProperties": False,
}

SYSTEM = f"""You are an agent that answers questions step by step.
You have two tools:
- calculator: evaluates arithmetic such as "17 * 23" or "(4 + 5) * 2".
- final_answer: gives the answer to the user and ends the task.
Reply with one JSON object per turn matching this schema: {json.dumps(TOOL_CALL)}
After a calculator call you receive an Observation with its result."""

_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.USub: operator.neg,
}


def calculator(expression: str) -> str:
    """Evaluate + - * / arithmetic on numbers; anything else is reported as an error."""

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.operand))
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        raise ValueError("only numbers and + - * / are allowed")

    try:
        result = value(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError) as e:
        return f"error: {e}"
    return str(int(result) if float(result).is_integer() else round(result, 6))


TOOLS = {"calculator": calculator}


@sgl.function
def react_agent(s, question, max_steps=3):
    s += sgl.system(SYSTEM)
    s += sgl.user(question)
    for step in range(max_steps):
        s += sgl.assistant(sgl.gen(f"call_{step}", json_schema=TOOL_CALL, max_tokens=64))
        try:
            call = json.loads(s[f"call_{step}"])
        except json.JSONDecodeError:  # cut off by max_tokens
            break
        if call["tool"] == "final_answer":
            return call["input"]
        s += sgl.user(f"Observation: {TOOLS[call['tool']](call['input'])}")
    s += sgl.user("Give your final answer in one short sentence.")
    s += sgl.assistant(sgl.gen("final", max_tokens=32))
    return s["final"]


def main(url: str, question: str, max_steps: int = 3) -> sgl.ProgramState:
    sgl.set_default_backend(sgl.RuntimeEndpoint(url))
    return react_agent.run(question=question, max_steps=max_steps, temperature=0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:30000")
    parser.add_argument("--question", default="What is 17 * 23?")
    parser.add_argument("--max-steps", type=int, default=3)
    args = parser.parse_args()
    state = main(args.url, args.question, args.max_steps)
    for message in state.messages()[1:]:
        print(f"{message['role']:>9}: {message['content']}")
    print("answer:", state.ret_value)
