"""Request schemas for /docs and /openapi.json.

The POST routes read and validate their bodies themselves (a size limit before parsing,
strict types, errors in OpenAI's shape), so FastAPI does not see their models; this adds each
route's model to the OpenAPI document, with `sampling_params` described by SamplingParams.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, TypeAdapter

from runtime.sampling.params import SamplingParams

REF = "#/components/schemas/{model}"


def _schema(model) -> tuple[dict, dict]:
    """(the schema of `model`, the schemas it refers to), refs pointing into components."""
    adapter = model if isinstance(model, TypeAdapter) else TypeAdapter(model)
    schema = adapter.json_schema(ref_template=REF)
    return schema, schema.pop("$defs", {})


def describe_request_bodies(app: FastAPI, bodies: dict[str, type[BaseModel]]) -> None:
    """Make app.openapi() show `bodies[path]` as the JSON body of each POST route."""

    def openapi() -> dict:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
        components = doc.setdefault("components", {}).setdefault("schemas", {})
        params, defs = _schema(SamplingParams)
        components.update(defs)
        components["SamplingParams"] = params
        for path, model in bodies.items():
            operation = doc.get("paths", {}).get(path, {}).get("post")
            if operation is None:
                continue
            schema, defs = _schema(model)
            components.update(defs)
            if "sampling_params" in schema.get("properties", {}):
                one = {"$ref": REF.format(model="SamplingParams")}
                schema["properties"]["sampling_params"] = {
                    "anyOf": [one, {"type": "array", "items": one}, {"type": "null"}],
                    "description": "One object, or one per prompt of a batch.",
                }
            components[model.__name__] = schema
            operation["requestBody"] = {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": REF.format(model=model.__name__)}}
                },
            }
            operation.setdefault("description", model.__doc__ or "")
        app.openapi_schema = doc
        return doc

    app.openapi = openapi
