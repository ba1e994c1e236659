#!/usr/bin/env python3
"""Condenses `ncu --metrics gpu__time_duration.sum --print-summary per-kernel` output.

One line per kernel entry of the summary (name with template arguments, grid): invocations (the
header's "Invocations N"), the average of its gpu__time_duration.sum line (ncu prints
min / max / average in ns, us, ms or s) in microseconds and the total, sorted by total; the last
line sums every entry. Usage: ncu_kernel_table.py NCU_OUTPUT [TOP]
"""
import re
import sys

HEADER = re.compile(r"^\s{2}(\S.*?)\s\((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\)"
                    r".*?Invocations (\d+)")
METRIC = re.compile(r"gpu__time_duration\.sum\s+(\S+)\s+(.*)$")
SCALE = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6,
         "nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}


def main():
    rows = []
    name = grid = None
    count = 0
    with open(sys.argv[1], errors="replace") as f:
        for line in f:
            m = HEADER.match(line)
            if m:
                name = re.sub(r"\(.*\)$", "", m.group(1)).replace("stepserve::kernels::", "")
                grid = "%sx%s" % (m.group(2), m.group(3))
                count = int(m.group(8))
                continue
            m = METRIC.search(line)
            if m and name:
                values = [float(v.replace(",", "")) for v in m.group(2).split()
                          if re.fullmatch(r"[\d.,]+", v)]
                if values:
                    if m.group(1) not in SCALE:
                        sys.exit("unknown time unit %r in: %s" % (m.group(1), line.strip()))
                    avg = values[-1] * SCALE[m.group(1)]
                    rows.append((avg * count, avg, count, name, grid))
                name = None
    rows.sort(reverse=True)
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    for total, avg, count, name, grid in rows[:top]:
        print("%-66s grid=%9s n=%4d avg_us=%8.2f total_us=%9.1f" % (name[:66], grid, count, avg,
                                                                  total))
    print("all %d entries: total_us=%.1f" % (len(rows), sum(r[0] for r in rows)))


if __name__ == "__main__":
    main()
