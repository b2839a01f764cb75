#!/usr/bin/env python3
"""Validates the admin API's OpenAPI document (openapi-spec-validator), then checks live responses against it.
Usage: check-openapi.py DOCUMENT [RESPONSES]
RESPONSES is a JSON list of {"method", "path" (the OpenAPI path template), "status", "body"}: each body must
match the schema the document gives for that operation and status."""
import json
import sys

import jsonschema
from openapi_spec_validator import validate

document = json.load(open(sys.argv[1]))
validate(document)
problems = []
checked = 0
if len(sys.argv) > 2:

    def resolve(node):
        while isinstance(node, dict) and "$ref" in node:
            name = node["$ref"].split("/")
            node = document
            for part in name[1:]:
                node = node[part]
        return node

    for response in json.load(open(sys.argv[2])):
        operation = document["paths"][response["path"]][response["method"].lower()]
        spec = resolve(operation["responses"].get(str(response["status"])))
        if spec is None:
            problems.append(f"{response['method']} {response['path']}: status {response['status']} is not documented")
            continue
        if "content" not in spec:
            # A response documented without a body (204) must have none.
            if response["body"] in (None, {}, ""):
                checked += 1
            else:
                problems.append(f"{response['method']} {response['path']} {response['status']}: a body where none is documented")
            continue
        schema = spec["content"]["application/json"]["schema"]
        # Resolve $refs against the document itself (JSON Schema 2020-12, as OpenAPI 3.1 uses).
        wrapped = dict(schema)
        wrapped["components"] = document["components"]
        try:
            jsonschema.Draft202012Validator(wrapped, format_checker=jsonschema.FormatChecker()).validate(response["body"])
            checked += 1
        except jsonschema.ValidationError as error:
            problems.append(f"{response['method']} {response['path']} {response['status']}: {error.message} at {list(error.absolute_path)}")

for problem in problems:
    print("PROBLEM", problem)
print(f"document valid; {checked} responses match, {len(problems)} problems")
sys.exit(1 if problems else 0)
