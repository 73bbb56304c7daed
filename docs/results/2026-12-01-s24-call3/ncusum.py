"""Summarise ncu --csv --page details files: per kernel, duration, DRAM bytes, L2 hit rate."""
import csv, sys, collections
for path in sys.argv[1:]:
    rows = [r for r in csv.reader(open(path)) if len(r) > 10]
    if not rows:
        print(path, "no rows"); continue
    head = rows[0]; ix = {k: i for i, k in enumerate(head)}
    agg = collections.OrderedDict()
    for r in rows[1:]:
        key = (r[ix["ID"]], r[ix["Kernel Name"]][:50])
        agg.setdefault(key, {})[r[ix["Metric Name"]]] = (r[ix["Metric Value"]], r[ix["Metric Unit"]])
    print("==", path)
    for (i, name), m in agg.items():
        pick = [k for k in m if k in ("Duration", "dram__bytes_read.sum", "dram__bytes_write.sum",
                "lts__t_sector_hit_rate.pct", "DRAM Throughput", "Memory Throughput", "Compute (SM) Throughput")]
        print(i, name, "; ".join(f"{k}={m[k][0]} {m[k][1]}" for k in pick))
