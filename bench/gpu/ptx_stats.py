#!/usr/bin/env python3
"""Static instruction counts per kernel of one CUDA source, from its PTX (no GPU, no cuobjdump).

The decode kernels are bound by issued instructions (docs/cuda-engine.md, v11: two integer
divisions per item were 15% of ExpertDownCombineKernel), so a change to one can be checked here
before device time is spent: compare the counts before and after. PTX is not SASS (ptxas
schedules, rematerialises and may drop instructions), and these are static counts of the
unrolled code, not executed ones - a proxy for diffs, not a cycle model.

Usage: ptx_stats.py BUILD_DIR SOURCE.cu [NAME_SUBSTRING]
  BUILD_DIR: a CUDA build (cmake -DSTEPSERVE_CUDA=ON -G Ninja); the source's compile command is
  taken from it and run with -ptx. One JSON line per kernel entry whose demangled name contains
  NAME_SUBSTRING: total instructions and the classes that matter for these kernels.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

CLASSES = {
    "int_div_rem": re.compile(r"^(div|rem)\.(s|u)(32|64)\b"),
    "mul_wide_or_64": re.compile(r"^(mul\.wide\.|mul\.lo\.[su]64|mad\.lo\.[su]64|mad\.wide\.)"),
    "ld_global": re.compile(r"^ld\.global"),
    "ld_shared": re.compile(r"^ld\.shared"),
    "ld_local": re.compile(r"^ld\.local"),
    "st_global": re.compile(r"^st\.global"),
    "shfl": re.compile(r"^shfl\."),
    "dp4a": re.compile(r"^dp4a\."),
    "prmt": re.compile(r"^prmt\."),
    "branch": re.compile(r"^bra\b"),
}


def compile_command(build, source):
    src = os.path.abspath(source)
    targets = subprocess.run(["ninja", "-C", build, "-t", "targets", "all"], check=True,
                             capture_output=True, text=True).stdout
    base = os.path.basename(source) + ".o"
    objs = [line.split(":")[0] for line in targets.splitlines()
            if line.split(":")[0].endswith("/" + base)]
    for obj in objs:
        cmds = subprocess.run(["ninja", "-C", build, "-t", "commands", obj], check=True,
                              capture_output=True, text=True).stdout.strip().splitlines()
        if cmds and src in cmds[-1]:
            return cmds[-1], obj
    sys.exit("no compile command for %s in %s" % (source, build))


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    return out.stdout.splitlines()


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    build, source = sys.argv[1], sys.argv[2]
    wanted = sys.argv[3] if len(sys.argv) > 3 else ""
    cmd, obj = compile_command(build, source)
    with tempfile.TemporaryDirectory() as tmp:
        ptx = os.path.join(tmp, "out.ptx")
        cmd = cmd.replace(" -c ", " -ptx ").replace("-o " + obj, "-o " + ptx)
        cmd = re.sub(r" -M[TF] \S+", "", cmd).replace(" -MD ", " ")  # no dependency file
        subprocess.run(cmd, shell=True, check=True, cwd=build)
        text = open(ptx).read()
    entries = []
    for m in re.finditer(r"\.entry\s+(\S+)\(", text):
        start = text.index("{", m.end())
        depth, k = 0, start
        while True:
            if text[k] == "{":
                depth += 1
            elif text[k] == "}":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        entries.append((m.group(1), text[start:k]))
    names = demangle([e[0] for e in entries])
    for (mangled, body), name in zip(entries, names):
        if wanted not in name:
            continue
        counts = {c: 0 for c in CLASSES}
        total = 0
        for line in body.splitlines():
            s = line.strip()
            if not s or s.startswith(("//", ".", "$", "{", "}")) or s.endswith(":"):
                continue
            s = re.sub(r"^@!?%p\d+\s+", "", s)  # predicate guard
            total += 1
            for c, pattern in CLASSES.items():
                if pattern.match(s):
                    counts[c] += 1
        short = name.replace("(anonymous namespace)::", "").replace("stepserve::kernels::", "")
        short = re.sub(r"^void ", "", re.sub(r"\((?!.*[<>]).*\)$", "", short))
        print(json.dumps({"kernel": short, "ptx_instructions": total,
                          **counts}))


if __name__ == "__main__":
    main()
