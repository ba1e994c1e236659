#!/usr/bin/env python3
"""Condenses `ncu --metrics gpu__time_duration.sum --print-summary per-kernel` output.

One line per kernel (name with template arguments, grid), sorted by total time:
invocations, average and total microseconds. Usage: ncu_kernel_table.py NCU_OUTPUT [TOP]
"""
import re
import sys

HEADER = re.compile(r"^\s{2}(\S.*?)\s\((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\)")
INVOCATIONS = re.compile(r"(\d+)\s+invocations?", re.IGNORECASE)
METRIC = re.compile(r"gpu__time_duration\.sum\s+(\S+)\s+(.*)$")
SCALE = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}


def main():
    rows = []
    name = grid = None
    count = 1
    with open(sys.argv[1], errors="replace") as f:
        for line in f:
            m = HEADER.match(line)
            if m:
                name = re.sub(r"\(.*\)$", "", m.group(1)).replace("stepserve::kernels::", "")
                grid = "%sx%s" % (m.group(2), m.group(3))
                count = 1
                inv = INVOCATIONS.search(line)
                if inv:
                    count = int(inv.group(1))
                continue
            inv = INVOCATIONS.search(line)
            if inv and name:
                count = int(inv.group(1))
            m = METRIC.search(line)
            if m and name:
                values = [float(v.replace(",", "")) for v in m.group(2).split()
                          if re.fullmatch(r"[\d.,]+", v)]
                if not values:
                    continue
                avg = values[-1] * SCALE.get(m.group(1), 1.0)
                rows.append((avg * count, name, grid, count, avg))
                name = None
    rows.sort(reverse=True)
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    for total, name, grid, count, avg in rows[:top]:
        print("%-70s grid=%9s n=%4d avg_us=%8.2f sum_us=%9.1f" % (name[:70], grid, count, avg,
                                                                  total))


if __name__ == "__main__":
    main()
