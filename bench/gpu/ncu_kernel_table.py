#!/usr/bin/env python3
"""Condenses `ncu --metrics gpu__time_duration.sum --print-summary per-kernel` output.

One line per kernel entry of the summary (name with template arguments, grid), sorted by the
last value on its gpu__time_duration.sum line (ncu's per-kernel average), in microseconds.
Invocation counts are not printed: in the session-8 run this parser found none in the summary
text (every kernel read as one invocation), so totals per kernel would have been wrong; read them
from the raw output. Usage: ncu_kernel_table.py NCU_OUTPUT [TOP]
"""
import re
import sys

HEADER = re.compile(r"^\s{2}(\S.*?)\s\((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\)")
METRIC = re.compile(r"gpu__time_duration\.sum\s+(\S+)\s+(.*)$")
SCALE = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}


def main():
    rows = []
    name = grid = None
    with open(sys.argv[1], errors="replace") as f:
        for line in f:
            m = HEADER.match(line)
            if m:
                name = re.sub(r"\(.*\)$", "", m.group(1)).replace("stepserve::kernels::", "")
                grid = "%sx%s" % (m.group(2), m.group(3))
                continue
            m = METRIC.search(line)
            if m and name:
                values = [float(v.replace(",", "")) for v in m.group(2).split()
                          if re.fullmatch(r"[\d.,]+", v)]
                if values:
                    rows.append((values[-1] * SCALE.get(m.group(1), 1.0), name, grid))
                name = None
    rows.sort(reverse=True)
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    for avg, name, grid in rows[:top]:
        print("%-70s grid=%9s avg_us=%8.2f" % (name[:70], grid, avg))


if __name__ == "__main__":
    main()
