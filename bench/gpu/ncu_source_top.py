#!/usr/bin/env python3
"""The SASS instructions of one kernel where its warps were sampled most, from an ncu source-page
CSV export (`ncu -i R.ncu-rep --page source --csv --print-source sass`, call_ncu_source).

Usage: ncu_source_top.py FILE.csv [N]
Prints the export's columns once (their names differ between ncu versions), then the N
instructions with the most warp-state samples: address, samples (all / not issued), executed
count where the export has one, and the SASS text. A stall the kernel's time goes to shows as a
few instructions holding most of the samples - the one after a load that waits on it, a shuffle,
a fence.
"""
import csv
import sys


def number(v):
    try:
        return float(str(v).replace(",", ""))
    except ValueError:
        return 0.0


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    lines = open(sys.argv[1], errors="replace").read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"') and "Source" in l), None)
    if start is None:
        sys.exit("no CSV table with a Source column in %s" % sys.argv[1])
    rows = list(csv.reader(lines[start:]))
    header, body = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
    print("columns:", " | ".join(header))

    def col(*keys):
        for i, h in enumerate(header):
            if all(k.lower() in h.lower() for k in keys):
                return i
        return None

    src, addr = col("Source"), col("Address")
    all_s = col("Sampling", "All") or col("Stall", "All")
    not_issued = col("Sampling", "Not") or col("Stall", "Not")
    executed = col("Instructions Executed") or col("inst_executed")
    if all_s is None:
        sys.exit("no warp-state sampling column")
    total = sum(number(r[all_s]) for r in body) or 1.0
    print("instructions %d, samples %d" % (len(body), total))
    for r in sorted(body, key=lambda r: -number(r[all_s]))[:n]:
        print("%8s %6.2f%% %7d %7s %9s  %s" % (
            r[addr] if addr is not None else "", 100 * number(r[all_s]) / total, number(r[all_s]),
            r[not_issued] if not_issued is not None else "",
            r[executed] if executed is not None else "", r[src].strip()[:90]))


if __name__ == "__main__":
    main()
