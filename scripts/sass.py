#!/usr/bin/env python3
"""SASS of the kernels of one CUDA source, without a GPU: loops, spills and instruction classes.

ptxas -v says how many bytes a kernel spills, not where; PTX (bench/gpu/ptx_stats.py) is not what
runs. This compiles the source to a cubin with the build's own nvcc command and disassembles it
with cuobjdump, then lists each matching kernel's loops (a branch back to an earlier address:
the instructions between its target and the branch) with their instruction counts, local-memory
spill traffic (LDL / STL) and the classes that matter for the decode kernels.

Usage: sass.py BUILD_DIR SOURCE.cu [NAME_SUBSTRING] [--dump] [--save=FILE | --from=FILE]
  BUILD_DIR: a CUDA build (cmake -DSTEPSERVE_CUDA=ON -G Ninja). NAME_SUBSTRING filters the
  kernel names (demangled, or as printed: namespaces dropped). SASS_NVCC_FLAGS: extra nvcc
  flags (a compile-time switch, -DNAME=1), appended to the build's command. --dump prints the
  kernels' SASS too. --save=FILE keeps the disassembly; --from=FILE reads one saved instead of
  compiling (BUILD_DIR and SOURCE are then not read: any two words do), e.g. to compare trees.

Disassembler: cuobjdump -sass from $STEPSERVE_CUOBJDUMP, else .tools/cuobjdump in the repository
(scripts/get-sass-tools.sh fetches it: the CUDA toolkit on this machine has no disassembler).
That one is CUDA 11.8's, which reads sm_90 code but not CUDA 13's cubin header (ELF ABI version 8,
the architecture in other e_flags bits), so the header of a copy is rewritten to the ABI 7 form
for sm_90 first; the code sections are left as they are. (cuobjdump prints branch targets as
addresses; nvdisasm's labels are sometimes left undefined for these cubins.)
"""
import bisect
import os
import re
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "gpu"))
import ptx_stats  # noqa: E402  (compile_command, demangle)

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CLASSES = {
    "LDG": re.compile(r"\bLDG\."),
    "LDS": re.compile(r"\bLDS\b"),
    "LDL": re.compile(r"\bLDL\b"),
    "STL": re.compile(r"\bSTL\b"),
    "IDP/DP4A": re.compile(r"\bIDP\.|\bDP4A\b"),
    "PRMT": re.compile(r"\bPRMT\b"),
    "SHFL": re.compile(r"\bSHFL\."),
    "IMAD/IADD (wide)": re.compile(r"\bIMAD\.WIDE|\bIADD3\.X|\bIMAD\.X"),
    "BRA": re.compile(r"\bBRA\b"),
    "MMA": re.compile(r"\bHMMA\.|\bIMMA\.|\bHGMMA\."),
    "LDSM": re.compile(r"\bLDSM\."),
    "LDGSTS": re.compile(r"\bLDGSTS\b"),
    "BAR": re.compile(r"\bBAR\.|\bDEPBAR\b"),
}
INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?);")


def cuobjdump_path():
    path = os.environ.get("STEPSERVE_CUOBJDUMP") or os.path.join(ROOT, ".tools", "cuobjdump")
    if not os.path.exists(path):
        sys.exit("no cuobjdump at %s: run scripts/get-sass-tools.sh" % path)
    return path


def patched_cubin(src, dst):
    b = bytearray(open(src, "rb").read())
    if b[8] >= 8:  # CUDA 12.8+ header: rewrite to the ABI 7 form for sm_90
        b[7], b[8] = 0x33, 7
        struct.pack_into("<I", b, 0x30, 0x5A055A)  # SM90, virtual SM90, 64-bit, unified tex
    open(dst, "wb").write(b)


ENCODING_ONLY = re.compile(r"^\s*/\* 0x([0-9a-f]{16}) \*/\s*$")
UNDECODED = "(undecoded"


def kernels(sass):
    """(mangled name, [(address, text)]) per function in cuobjdump -sass output.

    Each instruction is two 64-bit words: the first on its line, the second on a line alone. An
    instruction the disassembler cannot decode prints both words alone and no text; it is listed
    as "(undecoded op 0x...)" (the first word's low 12 bits) so that counts and loop spans hold
    every instruction. With CUDA 11.8's cuobjdump on CUDA 13 code that is op 0x836, the integer
    add of an immediate that newer disassemblers print as VIADD."""
    out, name, body = [], None, []
    second_word_next, first = False, None
    for line in sass.splitlines():
        m = re.match(r"^\s*Function : (\S+)", line)
        if m:
            if name:
                out.append((name, body))
            name, body, second_word_next, first = m.group(1), [], False, None
            continue
        if not name:
            continue
        m = INSTR.search(line)
        if m:
            body.append((int(m.group(1), 16), m.group(2).strip()))
            second_word_next, first = True, None
            continue
        m = ENCODING_ONLY.match(line)
        if not m or not body:
            second_word_next, first = False, None
        elif second_word_next:
            second_word_next = False
        elif first is None:
            first = int(m.group(1), 16)
        else:
            body.append((body[-1][0] + 16, "%s op 0x%03x)" % (UNDECODED, first & 0xFFF)))
            first = None
    if name:
        out.append((name, body))
    return out


def loops(body):
    """Innermost-first list of (start index, end index, target address) of back-edge loops."""
    addrs = [addr for addr, _ in body]
    found = []
    for i, (addr, text) in enumerate(body):
        m = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", text)
        if not m:
            continue
        t = int(m.group(1), 16)
        if t <= addr:
            found.append((bisect.bisect_left(addrs, t), i, t))
    return sorted(found, key=lambda r: r[1] - r[0])


def class_counts(instrs):
    counts = {c: 0 for c in CLASSES}
    for _, text in instrs:
        for c, pattern in CLASSES.items():
            if pattern.search(text):
                counts[c] += 1
    return counts


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) < 2:
        sys.exit(__doc__)
    build, source = args[0], args[1]
    wanted = args[2] if len(args) > 2 else ""
    saved = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--from=")]
    if saved:
        text = open(saved[0]).read()
    else:
        text = disassemble(build, source)
        for a in sys.argv[1:]:
            if a.startswith("--save="):
                open(a.split("=", 1)[1], "w").write(text)
    report(text, wanted)


def disassemble(build, source):
    """cuobjdump -sass text of source compiled with the build's own command."""
    cmd, obj = ptx_stats.compile_command(build, source)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "out.cubin")
        cmd = cmd.replace(" -c ", " -cubin ").replace("-o " + obj, "-o " + cubin)
        cmd = re.sub(r" -M[TF] \S+", "", cmd).replace(" -MD ", " ")
        cmd += " " + os.environ.get("SASS_NVCC_FLAGS", "")  # e.g. -DSOME_SWITCH=1
        subprocess.run(cmd, shell=True, check=True, cwd=build, stderr=subprocess.DEVNULL)
        patched_cubin(cubin, cubin + ".90")
        return subprocess.run([cuobjdump_path(), "-sass", cubin + ".90"], capture_output=True,
                              text=True, check=True).stdout


def report(text, wanted):
    funcs = kernels(text)
    names = ptx_stats.demangle([f[0] for f in funcs])
    for (mangled, body), name in zip(funcs, names):
        short = name.replace("(anonymous namespace)::", "").replace("stepserve::kernels::", "")
        short = short.replace("gemv_internal::", "")
        short = re.sub(r"^void ", "", re.sub(r"\((?!.*[<>]).*\)$", "", short))
        if wanted not in name and wanted not in short:
            continue
        n_undecoded = sum(1 for _, t in body if t.startswith(UNDECODED))
        print("== %s: %d instructions, %s" % (short, len(body), class_counts(body)) +
              (" (%d undecoded)" % n_undecoded if n_undecoded else ""))
        for start, end, target in loops(body):
            seg = body[start:end + 1]
            gap = sum(1 for _, t in seg if t.startswith(UNDECODED))
            print("   loop 0x%04x-0x%04x: %d instructions%s, %s" %
                  (target, seg[-1][0], len(seg), " (%d undecoded)" % gap if gap else "",
                   {k: v for k, v in class_counts(seg).items() if v}))
        if "--dump" in sys.argv:
            for addr, t in body:
                print("   /*%04x*/ %s" % (addr, t))


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # the output piped into head
        sys.stderr.close()
