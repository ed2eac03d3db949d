"""GitHub's OpenAPI description: find the operation behind a request and validate bodies against it.

The description is OpenAPI 3.0.3, whose schema dialect is close to but not JSON Schema: `nullable` has no
JSON Schema meaning and `$ref`s point into the whole document rather than into one schema. On load, every
schema in the document is rewritten once into JSON Schema 2020-12 so that jsonschema can check bodies.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import referencing
import referencing.jsonschema

SPEC_ENV = "PERFCHECK_GITHUB_OPENAPI"
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SPEC = REPO_ROOT / ".cache" / "github-openapi" / "api.github.com.json"
SETUP_HINT = "run `make test` (or python tests/fakegithub/fetch_spec.py .cache/github-openapi)"

# The URI the document is registered under; every internal `$ref` is rewritten to be absolute against it
# so that a schema found deep inside the document can be the root of a validator on its own.
DOC_URI = "urn:perfcheck:github-openapi"
HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
# Long instance reprs in jsonschema messages (a whole pull request) would drown the useful part.
MAX_MESSAGE = 300


class SpecMissingError(RuntimeError):
    """The OpenAPI description has not been fetched; tests must fail rather than skip."""


def spec_path() -> Path:
    override = os.environ.get(SPEC_ENV)
    return Path(override) if override else DEFAULT_SPEC


@dataclass(frozen=True)
class Operation:
    method: str
    template: str
    operation_id: str
    pattern: re.Pattern[str] = field(repr=False, compare=False)
    param_names: tuple[str, ...] = field(repr=False, compare=False)
    # Literal characters in the template: with several matching templates, the most literal one wins.
    literal_chars: int = field(repr=False, compare=False)


@dataclass(frozen=True)
class Match:
    operation: Operation
    params: dict[str, str]


def _escape_pointer(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _allow_null(schema: dict[str, Any]) -> None:
    """OpenAPI's `nullable: true`, as JSON Schema: null is one more accepted value."""
    composite = any(key in schema for key in ("$ref", "allOf", "anyOf", "oneOf", "not"))
    if "type" in schema and not composite:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        schema["type"] = [*kinds, "null"]
        if "enum" in schema and None not in schema["enum"]:
            schema["enum"] = [*schema["enum"], None]
        return
    # Keywords like `$ref` or `allOf` would still reject null, so null becomes an alternative to all of them.
    inner = dict(schema)
    schema.clear()
    schema["anyOf"] = [inner, {"type": "null"}]


def _to_json_schema(schema: Any) -> None:
    """Rewrite one OpenAPI schema in place; walks only schema positions, never `example`/`default` data."""
    if not isinstance(schema, dict):
        return
    for key in ("properties", "patternProperties"):
        for sub in schema.get(key, {}).values():
            _to_json_schema(sub)
    for key in ("items", "additionalProperties", "not"):
        _to_json_schema(schema.get(key))
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(key, []):
            _to_json_schema(sub)
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        schema["$ref"] = DOC_URI + ref
    if schema.pop("nullable", False):
        _allow_null(schema)


def _content_schemas(holder: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for media in holder.get("content", {}).values():
        if isinstance(media.get("schema"), dict):
            yield media["schema"]


def _document_schemas(document: dict[str, Any]) -> Iterator[dict[str, Any]]:
    components = document.get("components", {})
    yield from components.get("schemas", {}).values()
    for parameter in components.get("parameters", {}).values():
        yield parameter.get("schema", {})
    for response in components.get("responses", {}).values():
        yield from _content_schemas(response)
    for header in components.get("headers", {}).values():
        yield header.get("schema", {})
    for item in document.get("paths", {}).values():
        for method in HTTP_METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            yield from _content_schemas(operation.get("requestBody", {}))
            for response in operation.get("responses", {}).values():
                yield from _content_schemas(response)


def _format_error(where: str, error: jsonschema.ValidationError) -> str:
    # For oneOf/anyOf the top-level message only says "not valid under any"; the closest branch says why.
    if error.context:
        error = jsonschema.exceptions.best_match(error.context)
    location = "/" + "/".join(str(part) for part in error.absolute_path)
    keyword = "/".join(str(part) for part in error.absolute_schema_path)
    message = error.message if len(error.message) <= MAX_MESSAGE else error.message[:MAX_MESSAGE] + "…"
    return f"{where}: at {location}: {message} (schema {keyword})"


class Spec:
    """One loaded description: operation lookup, examples, and cached body validators."""

    def __init__(self, document: dict[str, Any]) -> None:
        # Examples are kept untouched for building responses; schemas are converted in place.
        for schema in _document_schemas(document):
            _to_json_schema(schema)
        self.document = document
        resource = referencing.Resource.from_contents(
            document, default_specification=referencing.jsonschema.DRAFT202012
        )
        self._registry: referencing.Registry[Any] = referencing.Registry().with_resource(DOC_URI, resource)
        self._operations = self._index_operations()
        self._validators: dict[tuple[str, str], jsonschema.protocols.Validator | None] = {}
        self._lock = threading.Lock()

    def _resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        """Follow a document-internal `$ref` (parameters and responses are often shared components)."""
        while "$ref" in node:
            pointer = node["$ref"].removeprefix(DOC_URI).lstrip("#/")
            target: Any = self.document
            for token in pointer.split("/"):
                target = target[token.replace("~1", "/").replace("~0", "~")]
            node = target
        return node

    def _multi_segment_params(self, item: dict[str, Any], operation: dict[str, Any]) -> set[str]:
        names = set()
        for parameter in [*item.get("parameters", []), *operation.get("parameters", [])]:
            parameter = self._resolve(parameter)
            if parameter.get("in") == "path" and parameter.get("x-multi-segment"):
                names.add(parameter["name"])
        return names

    def _index_operations(self) -> dict[str, list[Operation]]:
        index: dict[str, list[Operation]] = {method: [] for method in HTTP_METHODS}
        for template, item in self.document["paths"].items():
            for method in HTTP_METHODS:
                if method not in item:
                    continue
                multi = self._multi_segment_params(item, item[method])
                index[method].append(_compile_operation(method, template, item[method], multi))
        return index

    def find(self, method: str, path: str) -> Match | None:
        """The operation GitHub would route (method, concrete path) to, or None when there is none."""
        best: Match | None = None
        for operation in self._operations.get(method.lower(), []):
            found = operation.pattern.fullmatch(path)
            if found is None:
                continue
            if best is None or operation.literal_chars > best.operation.literal_chars:
                values = (urllib.parse.unquote(value) for value in found.groups())
                best = Match(operation, dict(zip(operation.param_names, values, strict=True)))
        return best

    def example(self, name: str) -> Any:
        """A fresh copy of a `components/examples` value, safe for the caller to modify."""
        return copy.deepcopy(self.document["components"]["examples"][name]["value"])

    def _operation_node(self, operation: Operation) -> dict[str, Any]:
        node: dict[str, Any] = self.document["paths"][operation.template][operation.method]
        return node

    def declares(self, operation: Operation, status: int) -> bool:
        return str(status) in self._operation_node(operation).get("responses", {})

    def _schema_pointer(self, operation: Operation, key: str) -> str | None:
        """JSON pointer to the body schema: `request`, or a response status code."""
        node = self._operation_node(operation)
        prefix = f"/paths/{_escape_pointer(operation.template)}/{operation.method}"
        if key == "request":
            holder, prefix = node.get("requestBody"), prefix + "/requestBody"
        else:
            holder, prefix = node.get("responses", {}).get(key), f"{prefix}/responses/{key}"
        if holder is None:
            return None
        if "$ref" in holder:
            prefix = holder["$ref"].lstrip("#")
            holder = self._resolve(holder)
        if "schema" not in holder.get("content", {}).get("application/json", {}):
            return None
        return f"{prefix}/content/{_escape_pointer('application/json')}/schema"

    def _validator(self, operation: Operation, key: str) -> jsonschema.protocols.Validator | None:
        cache_key = (operation.operation_id, key)
        with self._lock:
            if cache_key not in self._validators:
                pointer = self._schema_pointer(operation, key)
                self._validators[cache_key] = (
                    None
                    if pointer is None
                    else jsonschema.Draft202012Validator(
                        {"$ref": f"{DOC_URI}#{pointer}"}, registry=self._registry
                    )
                )
            return self._validators[cache_key]

    def validate_request(self, operation: Operation, body: Any) -> list[str]:
        where = f"{operation.method.upper()} {operation.template} request body"
        request_body = self._operation_node(operation).get("requestBody")
        if request_body is None:
            return []
        if body is None:
            return (
                [f"{where}: missing, but the operation requires one"] if request_body.get("required") else []
            )
        validator = self._validator(operation, "request")
        if validator is None:
            return []
        return [_format_error(where, error) for error in validator.iter_errors(body)]

    def validate_response(self, operation: Operation, status: int, body: Any) -> list[str]:
        where = f"{operation.method.upper()} {operation.template} response {status}"
        validator = self._validator(operation, str(status))
        if validator is None:
            # Statuses without a JSON body in the description (204, or one GitHub does not document) are
            # checked by the caller, which knows whether it sent a body.
            return []
        return [_format_error(where, error) for error in validator.iter_errors(body)]


def _compile_operation(method: str, template: str, node: dict[str, Any], multi: set[str]) -> Operation:
    """A template like `/repos/{owner}/{repo}/commits/{ref}` as an anchored regex with named groups."""
    parts: list[str] = []
    names: list[str] = []
    literal = 0
    for piece in re.split(r"(\{[^}]+\})", template):
        if piece.startswith("{") and piece.endswith("}"):
            # Names like `enterprise-team` are no regex group names, hence positional groups.
            names.append(piece[1:-1])
            # Multi-segment parameters (a ref like `heads/main`) may contain slashes, others may not.
            parts.append("(.+)" if names[-1] in multi else "([^/]+)")
        else:
            parts.append(re.escape(piece))
            literal += len(piece)
    return Operation(method, template, node["operationId"], re.compile("".join(parts)), tuple(names), literal)


def load(path: Path | None = None) -> Spec:
    """The description at `path` (default: `spec_path()`), parsed and converted once per process."""
    return _load((path or spec_path()).resolve())


@functools.cache
def _load(path: Path) -> Spec:
    if not path.is_file():
        raise SpecMissingError(f"GitHub's OpenAPI description is missing at {path}: {SETUP_HINT}")
    with path.open("rb") as handle:
        return Spec(json.load(handle))
