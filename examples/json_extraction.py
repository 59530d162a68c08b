"""Extract structured data from a document: the JSON schema constrains decoding, so the
output always parses and has the fields the schema asks for.

    python examples/json_extraction.py --url http://127.0.0.1:30000
"""

import argparse
import json

import lang as sgl

DOCUMENT = """Invoice 2024-117
Sold by: Green Valley Farms, 12 Orchard Road, Springfield
Date: 3 March 2024
Items: 40 kg apples at 2.50 per kg; 10 kg pears at 3.00 per kg
Total due: 130.00 EUR within 30 days."""

INVOICE = {
    "type": "object",
    "properties": {
        "seller": {"type": "string", "maxLength": 40},
        "date": {"type": "string", "maxLength": 20},
        "total": {"type": "number"},
        "currency": {"enum": ["EUR", "USD", "GBP"]},
    },
    "required": ["seller", "date", "total", "currency"],
    "additionalProperties": False,
}


@sgl.function
def extract(s, document, schema):
    s += sgl.system("You extract data from documents into JSON.")
    s += sgl.user(f"Document:\n{document}\n\nReturn the seller, date, total and currency.")
    s += sgl.assistant(sgl.gen("json", json_schema=schema, max_tokens=96))


def main(url: str, document: str = DOCUMENT, schema: dict = INVOICE) -> dict:
    sgl.set_default_backend(sgl.RuntimeEndpoint(url))
    state = extract.run(document=document, schema=schema, temperature=0)
    return json.loads(state["json"])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:30000")
    args = parser.parse_args()
    print(json.dumps(main(args.url), indent=2))
