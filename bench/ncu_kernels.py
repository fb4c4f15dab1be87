#!/usr/bin/env python3
"""Where a training step's GPU time goes, kernel by kernel.

Reads what `ncu --csv --metrics gpu__time_duration.sum` printed for the steps
`cnn_train --cuda-profile-steps A:B` let it capture (other lines, such as
ncu's ==PROF== notes and cnn_train's own output, are skipped), and prints
per kernel name: its GPU time per step, its launches per step and its share,
largest first, then the total.  Where the capture holds more of the metrics
`--metrics` lists (each kernel's speed of light: SM and memory throughput,
the tensor pipe's and the warps' share of their peak, its registers, grid,
shared-memory bank conflicts, and what its warps stall on), a column each: percentages weighted by
each launch's time, registers and grid the largest, conflicts per launch.
`.gpu/run.sh profile` and `kernels` run it on the GPU machine;
tests/bats/bench.bats on fixtures of ncu's format.

    ncu --profile-from-start off --metrics gpu__time_duration.sum --csv \\
        cnn_train --device cuda --max-steps 22 --cuda-profile-steps 21:22 > ncu.csv
    bench/ncu_kernels.py --steps 2 ncu.csv
    bench/ncu_kernels.py --metrics      the metrics a column can show, for ncu --metrics
"""
import argparse
import collections
import csv
import io
import sys

# ncu's units of time, in microseconds
UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
         "second": 1e6, "s": 1e6}


# The columns beyond time: label, ncu's metric names (the first a capture
# holds is shown: GPUs name some differently), how launches combine.
COLUMNS = [
    ("sm%", ["sm__throughput.avg.pct_of_peak_sustained_elapsed"], "weighted"),
    ("mem%", ["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"], "weighted"),
    ("dram%", ["dram__throughput.avg.pct_of_peak_sustained_elapsed"], "weighted"),
    ("tc%", ["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
             "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"], "weighted"),
    ("warps%", ["sm__warps_active.avg.pct_of_peak_sustained_active"], "weighted"),
    ("regs", ["launch__registers_per_thread"], "max"),
    ("blocks", ["launch__grid_size"], "max"),
    ("bc_ld", ["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"], "per_launch"),
    ("bc_st", ["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"], "per_launch"),
    # what the warps wait on, % of their active cycles: global memory (long
    # scoreboard), __syncthreads, shared memory (short scoreboard), the
    # memory pipe's queue (mio throttle), a busy math pipe
    ("lsb%", ["smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct"], "weighted"),
    ("bar%", ["smsp__warp_issue_stalled_barrier_per_warp_active.pct"], "weighted"),
    ("ssb%", ["smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct"], "weighted"),
    ("mio%", ["smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct"], "weighted"),
    ("mth%", ["smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct"], "weighted"),
]
TIME = "gpu__time_duration.sum"


def number(v):
    """ncu's value as a float (thousands separators dropped), None where it
    is none ("n/a")."""
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return None


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
    ap.add_argument("csv", nargs="?", help="ncu's --csv output (- for standard input)")
    ap.add_argument("--steps", type=int, default=1, help="training steps the capture holds")
    ap.add_argument("--top", type=int, default=20, help="kernel names listed (default 20)")
    ap.add_argument("--width", type=int, default=70, help="characters of a kernel's name")
    ap.add_argument("--metrics", action="store_true",
                    help="print the metrics a column can show, one a line, and exit")
    a = ap.parse_args()
    if a.metrics:
        print(TIME)
        for _, names, _ in COLUMNS:
            print("\n".join(names))
        return
    if a.csv is None:
        ap.error("expected ncu's CSV file (or - for standard input)")
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
    # per launch (ncu's ID; without one, each time row is a launch of its own)
    launches = collections.OrderedDict()
    wanted = {m for _, names, _ in COLUMNS for m in names}
    for i, r in enumerate(rows):
        metric = r["Metric Name"]
        if metric != TIME and metric not in wanted:
            continue
        lid = r.get("ID") or ("row", i)
        l = launches.setdefault(lid, {"name": r["Kernel Name"], "time": None, "m": {}})
        if metric != TIME:
            v = number(r["Metric Value"])
            if v is not None:
                l["m"][metric] = v
            continue
        unit = r["Metric Unit"].strip()
        if unit not in UNITS:
            sys.exit("ncu_kernels: %s: unit %r of gpu__time_duration.sum: expected one of %s"
                     % (a.csv, unit, ", ".join(UNITS)))
        v = number(r["Metric Value"])
        if v is None:
            sys.exit("ncu_kernels: %s: value %r of %s: expected a number"
                     % (a.csv, r["Metric Value"], r["Kernel Name"]))
        l["time"] = v * UNITS[unit]
    time = collections.Counter()
    calls = collections.Counter()
    per = collections.defaultdict(list)   # kernel name: its launches
    for l in launches.values():
        if l["time"] is None:
            continue
        k = short(l["name"], a.width)
        time[k] += l["time"]
        calls[k] += 1
        per[k].append(l)
    total = sum(time.values())
    if not calls:
        sys.exit("ncu_kernels: %s: no gpu__time_duration.sum rows" % a.csv)
    # the columns the capture holds, each from the first of its names there
    cols = []
    for label, names, how in COLUMNS:
        held = [m for m in names if any(m in l["m"] for l in launches.values())]
        if held:
            cols.append((label, held[0], how))

    def value(ls, metric, how):
        got = [(l["m"][metric], l["time"]) for l in ls if metric in l["m"]]
        if not got:
            return "-"
        if how == "max":
            return "%.0f" % max(v for v, _ in got)
        if how == "per_launch":
            return "%.0f" % (sum(v for v, _ in got) / len(got))
        w = sum(t for _, t in got)
        return "%.1f" % (sum(v * t for v, t in got) / w if w > 0 else
                         sum(v for v, _ in got) / len(got))

    def line(name, t, n, ls):
        extra = "".join(" %7s" % value(ls, m, how) for _, m, how in cols)
        print("%-*s %10.1f %7.1f %5.1f%%%s" % (a.width, name, t / a.steps, n / a.steps,
                                              100.0 * t / total if total else 0.0, extra))

    print("%-*s %10s %7s %6s%s" % (a.width, "kernel", "us/step", "calls", "share",
                                   "".join(" %7s" % label for label, _, _ in cols)))
    top = time.most_common(a.top)
    for k, t in top:
        line(k, t, calls[k], per[k])
    rest = [k for k in time if k not in dict(top)]
    if rest:
        line("(%d more)" % len(rest), sum(time[k] for k in rest), sum(calls[k] for k in rest),
             [l for k in rest for l in per[k]])
    line("total", total, sum(calls.values()), [l for k in time for l in per[k]])


if __name__ == "__main__":
    main()
