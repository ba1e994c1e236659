#!/usr/bin/python3
"""Checks dashboard and alert queries against the metric contract (docs/metrics.md).

1. Parses the metric table of docs/metrics.md (format documented at its top).
2. Collects every PromQL expression of the Grafana dashboard (panel targets) and writes them as
   recording rules into OUT_DIR/dashboard-queries.rules.yaml, with Grafana variables replaced,
   so that `promtool check rules` parses each one.
3. Checks that every stepserve_* name used by the dashboard (targets and variable queries) and by
   the alert rules is a documented metric (histograms also as _bucket/_sum/_count).

Usage: check-queries.py METRICS_MD DASHBOARD_JSON RULES_YAML OUT_DIR"""
import json
import re
import sys

import yaml

metrics_md, dashboard_path, rules_path, out_dir = sys.argv[1:5]
errors = []

ROW = re.compile(r"^\|\s*`(stepserve_[a-z0-9_]+)`\s*\|([^|]*)\|")
metrics = {}
section = ""
with open(metrics_md, encoding="utf-8") as f:
    for line in f:
        if line.startswith("## "):
            section = line[3:].strip()
        m = ROW.match(line) if section == "Metrics" else None
        if not m:
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        name, mtype = m.group(1), cells[1]
        if len(cells) != 5:
            errors.append(f"{metrics_md}: {name}: expected 5 cells, got {len(cells)}")
        if mtype not in ("counter", "gauge", "histogram"):
            errors.append(f"{metrics_md}: {name}: bad type {mtype!r}")
        if mtype == "counter" and not name.endswith("_total"):
            errors.append(f"{metrics_md}: {name}: counters must end in _total")
        if mtype != "counter" and name.endswith("_total"):
            errors.append(f"{metrics_md}: {name}: only counters end in _total")
        if name in metrics:
            errors.append(f"{metrics_md}: {name}: listed twice")
        metrics[name] = mtype
if len(metrics) < 30:
    errors.append(f"{metrics_md}: only {len(metrics)} metrics parsed; table format broken?")

allowed = set()
for name, mtype in metrics.items():
    allowed.add(name)
    if mtype == "histogram":
        allowed.update(name + s for s in ("_bucket", "_sum", "_count"))

NAME = re.compile(r"\bstepserve_[a-zA-Z0-9_]+")


def check_names(expr, where):
    used = NAME.findall(expr)
    for name in used:
        if name not in allowed:
            errors.append(f"{where}: {name} is not in {metrics_md}")
    return used


with open(dashboard_path, encoding="utf-8") as f:
    dashboard = json.load(f)


def walk_panels(panels):
    for p in panels:
        yield p
        yield from walk_panels(p.get("panels", []))


rules = []
for panel in walk_panels(dashboard.get("panels", [])):
    for target in panel.get("targets", []):
        expr = target.get("expr")
        if not expr:
            continue
        where = f"dashboard panel {panel.get('title')!r} {target.get('refId')}"
        if not check_names(expr, where):
            errors.append(f"{where}: names no stepserve metric")
        concrete = expr.replace("$__rate_interval", "5m").replace("$__interval", "1m")
        concrete = re.sub(r"\$\{?[a-zA-Z_][a-zA-Z0-9_]*\}?", "x", concrete)
        rules.append({"record": f"dashboard:query:{len(rules)}", "expr": concrete})
for var in dashboard.get("templating", {}).get("list", []):
    q = var.get("query")
    if isinstance(q, dict):
        q = q.get("query", "")
    if var.get("type") == "query" and q:
        check_names(q, f"dashboard variable {var.get('name')}")
if not rules:
    errors.append(f"{dashboard_path}: no queries found")

with open(f"{out_dir}/dashboard-queries.rules.yaml", "w", encoding="utf-8") as f:
    yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f, sort_keys=False)

with open(rules_path, encoding="utf-8") as f:
    rule_file = yaml.safe_load(f)
for group in rule_file["groups"]:
    for rule in group["rules"]:
        name = rule.get("alert") or rule.get("record")
        check_names(rule["expr"], f"{rules_path}: {name}")

for e in errors:
    print(f"check-queries: {e}", file=sys.stderr)
print(f"check-queries: {len(metrics)} metrics in the contract, {len(rules)} dashboard queries")
sys.exit(1 if errors else 0)
