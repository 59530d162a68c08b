"""A tool loop with the official openai client: the model asks for a weather report or a
calculation, this program runs the tool and sends the result back, until the model answers.

    python -m runtime.launch_server --model-path smollm2 --port 30000
    python examples/tool_calls.py --base-url http://127.0.0.1:30000/v1

The first round uses tool_choice="required", so that even a small model calls a tool (the
server's grammar makes every call valid against the tool's parameters); later rounds use
"auto", and the last one "none", which asks for a text answer.
"""

from __future__ import annotations

import argparse
import ast
import json
import operator

from openai import OpenAI

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 30},
                    "unit": {"enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city", "unit"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "Evaluate an arithmetic expression such as (2 + 3) * 4.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "maxLength": 40}},
                "required": ["expression"],
                "additionalProperties": False,
            },
        },
    },
]

OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.USub: operator.neg,
}


def get_weather(city: str, unit: str) -> dict:
    """A made-up report (a real program would ask a weather service)."""
    celsius = 10 + sum(map(ord, city.lower())) % 20
    degrees = celsius if unit == "celsius" else celsius * 9 / 5 + 32
    return {"city": city, "temperature": degrees, "unit": unit, "sky": "cloudy"}


def calculate(expression: str) -> dict:
    """Arithmetic on numbers only (no names, no calls): safe to run on model output."""

    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](value(node.operand))
        raise ValueError("only numbers and + - * / are allowed")

    try:
        return {"expression": expression, "result": value(ast.parse(expression, mode="eval").body)}
    except (SyntaxError, ValueError, ZeroDivisionError) as e:
        return {"expression": expression, "error": str(e)}


FUNCTIONS = {"get_weather": get_weather, "calculate": calculate}


def run_tool(name: str, arguments: str) -> dict:
    return FUNCTIONS[name](**json.loads(arguments))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:30000/v1")
    parser.add_argument("--model", default="default")
    parser.add_argument("--question", default="What is the weather like in Paris?")
    parser.add_argument("--rounds", type=int, default=2, help="rounds that may call tools")
    parser.add_argument("--max-tokens", type=int, default=64, help="per reply")
    args = parser.parse_args()

    client = OpenAI(base_url=args.base_url, api_key="unused")
    messages = [{"role": "user", "content": args.question}]
    print(f"user: {args.question}")
    for round_ in range(args.rounds + 1):
        choice = "required" if round_ == 0 else "auto" if round_ < args.rounds else "none"
        reply = client.chat.completions.create(
            model=args.model,
            messages=messages,
            tools=TOOLS,
            tool_choice=choice,
            max_tokens=args.max_tokens,
            temperature=0,
        )
        message = reply.choices[0].message
        if not message.tool_calls:
            print(f"assistant: {message.content}")
            return
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            result = run_tool(call.function.name, call.function.arguments)
            print(f"tool call: {call.function.name}({call.function.arguments}) -> {result}")
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
            )


if __name__ == "__main__":
    main()
