#!/usr/bin/env python3
"""Reference renderer for chat templates: python3-jinja2 configured like Hugging Face
transformers' apply_chat_template (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loopcontrols, raise_exception, strftime_now, tojson = json.dumps with ensure_ascii=False).

Usage: render_reference.py TEMPLATE_DIR CASES_JSON NOW_EPOCH
Prints a JSON object {template_file: {case_name: {"text": ...} | {"error": ...}}}."""
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def make_env(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(now, datetime.timezone.utc).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    template_dir, cases_path, now = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)
    env = make_env(now)
    results = {}
    for name in sorted(os.listdir(template_dir)):
        if not name.endswith(".jinja"):
            continue
        with open(os.path.join(template_dir, name), encoding="utf-8") as f:
            template = env.from_string(f.read())
        per = {}
        for case in cases:
            try:
                per[case["name"]] = {"text": template.render(**case["context"])}
            except Exception as e:  # any template failure: our renderer must fail too
                per[case["name"]] = {"error": "%s: %s" % (type(e).__name__, e)}
        results[name] = per
    json.dump(results, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
