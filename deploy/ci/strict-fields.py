#!/usr/bin/python3
"""Rejects unknown (misspelt) fields in rendered Kubernetes objects.

kubernetes-models validates types and required fields but accepts unknown keys, which the API
server would silently drop (e.g. `readOnlyRootFileSystem`). This walks each object along the model
classes of Debian's python3-kubernetes (API 1.22) and reports keys the model does not know.
Fields newer than 1.22 that the chart uses are listed in NEWER (checked in turn by kubernetes-models).
Kinds without a model here (prometheus-operator CRDs) are skipped.

Usage: strict-fields.py FILE.json...  (JSON arrays written by yaml2json.py)"""
import json
import re
import sys

import kubernetes.client as k8s

KINDS = {
    ("v1", "Service"): "V1Service",
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Secret"): "V1Secret",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("apps/v1", "StatefulSet"): "V1StatefulSet",
    ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
    ("networking.k8s.io/v1", "NetworkPolicy"): "V1NetworkPolicy",
    ("autoscaling/v2", "HorizontalPodAutoscaler"): "V2beta2HorizontalPodAutoscaler",
}
# Fields added after Kubernetes 1.22, by model class: name -> model class (or None = opaque).
NEWER = {
    "V1Probe": {"grpc": None},
    "V1Handler": {"sleep": None},
}
errors = []


def walk(value, type_name, path):
    if value is None:
        return
    m = re.fullmatch(r"list\[(.+)\]", type_name)
    if m:
        for i, item in enumerate(value):
            walk(item, m.group(1), f"{path}[{i}]")
        return
    m = re.fullmatch(r"dict\(str, (.+)\)", type_name)
    if m:
        for key, item in value.items():
            walk(item, m.group(1), f"{path}.{key}")
        return
    cls = getattr(k8s, type_name, None)
    if cls is None or not hasattr(cls, "openapi_types"):
        return  # primitive or opaque
    if not isinstance(value, dict):
        errors.append(f"{path}: expected an object ({type_name})")
        return
    json_to_attr = {v: k for k, v in cls.attribute_map.items()}
    newer = NEWER.get(type_name, {})
    for key, item in value.items():
        if key in json_to_attr:
            walk(item, cls.openapi_types[json_to_attr[key]], f"{path}.{key}")
        elif key not in newer:
            errors.append(f"{path}: unknown field {key!r} ({type_name})")


count = 0
for file in sys.argv[1:]:
    with open(file, encoding="utf-8") as f:
        for obj in json.load(f):
            model = KINDS.get((obj["apiVersion"], obj["kind"]))
            if model:
                count += 1
                walk(obj, model, f"{file}: {obj['kind']}/{obj['metadata'].get('name')}")
for e in errors:
    print(f"strict-fields: {e}", file=sys.stderr)
print(f"strict-fields: {count} objects checked, {len(errors)} unknown fields")
sys.exit(1 if errors else 0)
