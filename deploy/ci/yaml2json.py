#!/usr/bin/python3
"""Converts multi-document YAML (rendered manifests) to a JSON array, dropping empty documents.
Fails on duplicate mapping keys, which YAML parsers otherwise resolve silently.
Usage: yaml2json.py IN.yaml OUT.json"""
import json
import sys

import yaml


class UniqueKeyLoader(yaml.SafeLoader):
    pass


def construct_mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep)


UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)

with open(sys.argv[1], encoding="utf-8") as f:
    docs = [d for d in yaml.load_all(f, Loader=UniqueKeyLoader) if d]
for d in docs:
    for field in ("apiVersion", "kind", "metadata"):
        if field not in d:
            sys.exit(f"{sys.argv[1]}: a document lacks {field}")
with open(sys.argv[2], "w", encoding="utf-8") as f:
    json.dump(docs, f)
