#!/usr/bin/env python3
"""Where a training step's GPU time goes, kernel by kernel.

Reads what `ncu --csv --metrics gpu__time_duration.sum` printed for the steps
`cnn_train --cuda-profile-steps A:B` let it capture (other lines, such as
ncu's ==PROF== notes and cnn_train's own output, are skipped), and prints
per kernel name: its GPU time per step, its launches per step and its share,
largest first, then the total.  `.gpu/run.sh profile` runs it on the GPU
machine; tests/bats/bench.bats on a fixture of ncu's format.

    ncu --profile-from-start off --metrics gpu__time_duration.sum --csv \\
        cnn_train --device cuda --max-steps 22 --cuda-profile-steps 21:22 > ncu.csv
    bench/ncu_kernels.py --steps 2 ncu.csv
"""
import argparse
import collections
import csv
import io
import sys

# ncu's units of time, in microseconds
UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
         "second": 1e6, "s": 1e6}


def short(name, width):
    """A kernel's name without its return type and parameter list, at most
    width characters: "void ns::k<float>(float *, int)" is "ns::k<float>"."""
    name = name.strip().replace("(anonymous namespace)::", "")
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i].rstrip()
                break
    if name.startswith("void "):
        name = name[5:]
    return name if len(name) <= width else name[:width - 3] + "..."


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu's --csv output (- for standard input)")
    ap.add_argument("--steps", type=int, default=1, help="training steps the capture holds")
    ap.add_argument("--top", type=int, default=20, help="kernel names listed (default 20)")
    ap.add_argument("--width", type=int, default=70, help="characters of a kernel's name")
    a = ap.parse_args()
    if a.steps < 1:
        ap.error("--steps %d: expected 1 or more" % a.steps)
    f = sys.stdin if a.csv == "-" else open(a.csv, encoding="utf-8", errors="replace")
    lines = [l for l in f if l.startswith('"')]
    if not lines:
        sys.exit("ncu_kernels: %s holds no CSV rows (did ncu capture any kernel? "
                 "--profile-from-start off needs cnn_train --cuda-profile-steps)" % a.csv)
    rows = csv.DictReader(io.StringIO("".join(lines)))
    need = {"Kernel Name", "Metric Name", "Metric Unit", "Metric Value"}
    if not need <= set(rows.fieldnames or []):
        sys.exit("ncu_kernels: %s: expected ncu's CSV columns %s, got %s"
                 % (a.csv, ", ".join(sorted(need)), ", ".join(rows.fieldnames or [])))
    time = collections.Counter()
    calls = collections.Counter()
    for r in rows:
        if r["Metric Name"] != "gpu__time_duration.sum":
            continue
        unit = r["Metric Unit"].strip()
        if unit not in UNITS:
            sys.exit("ncu_kernels: %s: unit %r of gpu__time_duration.sum: expected one of %s"
                     % (a.csv, unit, ", ".join(UNITS)))
        try:
            v = float(r["Metric Value"].replace(",", ""))
        except ValueError:
            sys.exit("ncu_kernels: %s: value %r of %s: expected a number"
                     % (a.csv, r["Metric Value"], r["Kernel Name"]))
        k = short(r["Kernel Name"], a.width)
        time[k] += v * UNITS[unit]
        calls[k] += 1
    total = sum(time.values())
    if not calls:
        sys.exit("ncu_kernels: %s: no gpu__time_duration.sum rows" % a.csv)
    def line(name, t, n):
        print("%-*s %10.1f %7.1f %5.1f%%" % (a.width, name, t / a.steps, n / a.steps,
                                            100.0 * t / total if total else 0.0))

    print("%-*s %10s %7s %6s" % (a.width, "kernel", "us/step", "calls", "share"))
    top = time.most_common(a.top)
    for k, t in top:
        line(k, t, calls[k])
    rest = [k for k in time if k not in dict(top)]
    if rest:
        line("(%d more)" % len(rest), sum(time[k] for k in rest), sum(calls[k] for k in rest))
    line("total", total, sum(calls.values()))


if __name__ == "__main__":
    main()
