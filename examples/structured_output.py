"""Output that always parses: a JSON schema (OpenAI `response_format`), a regex and a lark
grammar (the native `/generate` API).

    python examples/structured_output.py --url http://127.0.0.1:30000
"""

import argparse
import json

import httpx
from openai import OpenAI

CITY = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "country": {"type": "string", "maxLength": 40},
        "population_millions": {"type": "number", "minimum": 0, "maximum": 100},
    },
    "required": ["name", "country", "population_millions"],
    "additionalProperties": False,
}
IPV4 = r"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
EQUATION = """
start: NUMBER " + " NUMBER " = " NUMBER
NUMBER: /[1-9][0-9]{0,2}/
"""


def generate(url: str, text: str, **sampling) -> str:
    body = {"text": text, "sampling_params": {"temperature": 0, **sampling}}
    r = httpx.post(f"{url}/generate", json=body, timeout=120)
    r.raise_for_status()
    return r.json()["text"]


def main(url: str, max_tokens: int = 64) -> dict:
    client = OpenAI(base_url=f"{url}/v1", api_key="unused")
    model = client.models.list().data[0].id
    reply = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Describe Paris as JSON."}],
        max_tokens=max_tokens,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": CITY}},
    )
    city = json.loads(reply.choices[0].message.content)
    ip = generate(url, "The server's IPv4 address is ", regex=IPV4, max_new_tokens=24)
    sum_ = generate(url, "A sum and its result: ", ebnf=EQUATION, max_new_tokens=24)
    print("json_schema:", city)
    print("regex:      ", ip)
    print("ebnf:       ", sum_)
    return {"city": city, "ip": ip, "expression": sum_}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:30000")
    main(parser.parse_args().url)
