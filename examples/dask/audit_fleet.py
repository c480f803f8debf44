#!/usr/bin/env python3
"""Audit many captures on a Dask cluster: map each capture in parallel, group the facts by
session id, reduce with mcp-resume-audit, and (with --check) compare with the single run.

    python3 examples/dask/audit_fleet.py --bin target/release/mcp-resume-audit \
        --workdir /tmp/fleet --check CAPTURE...

Without --scheduler, a LocalCluster bound to 127.0.0.1 is started and stopped here. With
--scheduler tcp://HOST:8786 the job runs on an existing cluster; the binary, the captures
and --workdir must then be reachable at the same paths from every worker (a shared file
system), as the paths are handed to the workers, not the bytes.

Steps (docs/facts.md describes the records):
  1. map:    one task per capture runs `mcp-resume-audit --emit-facts map-N.jsonl CAPTURE`;
  2. group:  a dask.bag of the facts records is grouped by (capture number, session id), the
             shuffle a fleet-sized job needs to bring a session's records together;
  3. write:  each group is written as one facts file (header first);
  4. reduce: `mcp-resume-audit --reduce` reads the group files, capture by capture in the
             order given, and writes the report;
  5. check:  the single run on the same captures must give the same bytes.
Exit status: the reduce's, or 4 when --check finds a difference.
"""

import argparse
import json
import os
import subprocess
import sys
import time



def map_capture(binary, extra, workdir, ordinal, capture):
    """The map step of one capture: its facts file (path) and how long it took."""
    out = os.path.join(workdir, "map-%05d.jsonl" % ordinal)
    t = time.monotonic()
    p = subprocess.run(
        [binary, "-j1", "-q", "--emit-facts", out, *extra, capture],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
    )
    # 1 and 3 are not failures of the map (it writes no verdicts); 2 says an input was
    # damaged, and its facts carry the message for the report.
    if p.returncode not in (0, 1, 2, 3):
        raise RuntimeError("map of %s failed: %s" % (capture, p.stderr.decode(errors="replace")))
    return out, time.monotonic() - t


def facts_records(item):
    """(ordinal, path) → [(ordinal, line)] of every record but the header."""
    ordinal, path = item
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    return [(ordinal, line) for line in lines[1:] if line.strip()]


def group_key(rec):
    """The grouping key: the capture and the record's session id ("" when it names none)."""
    ordinal, line = rec
    try:
        sid = json.loads(line).get("session_id") or ""
    except ValueError:
        sid = ""  # a damaged line travels with the session-less records; reduce names it
    return (ordinal, sid)


def write_group(group, workdir, header):
    """One group's records as a facts file; gives (ordinal, path)."""
    (ordinal, sid), recs = group
    import hashlib

    tag = hashlib.sha256(sid.encode()).hexdigest()[:16]
    path = os.path.join(workdir, "group-%05d-%s.jsonl" % (ordinal, tag))
    with open(path, "w", encoding="utf-8") as f:
        f.write(header + "\n")
        for _, line in recs:
            f.write(line + "\n")
    return ordinal, path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="the mcp-resume-audit binary")
    ap.add_argument("--workdir", required=True, help="where facts files go")
    ap.add_argument("--scheduler", help="an existing cluster's address (default: a LocalCluster)")
    ap.add_argument("--workers", type=int, default=2, help="LocalCluster worker processes")
    ap.add_argument("--check", action="store_true", help="compare with the single run")
    ap.add_argument("--report", help="write the report here (default: standard output)")
    ap.add_argument("--map-arg", action="append", default=[],
                    help="an option for the map step (e.g. --tls-keylog=FILE); repeatable")
    ap.add_argument("--reduce-arg", action="append", default=[],
                    help="an option for the reduce step (e.g. --sessions); repeatable")
    ap.add_argument("captures", nargs="+")
    a = ap.parse_args()

    import dask.bag as db
    from dask.distributed import Client, LocalCluster

    binary = os.path.abspath(a.bin)
    os.makedirs(a.workdir, exist_ok=True)
    workdir = os.path.abspath(a.workdir)

    cluster = None
    if a.scheduler:
        client = Client(a.scheduler)
    else:
        # Loopback only, no dashboard: nothing listens beyond this machine.
        cluster = LocalCluster(
            n_workers=a.workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        )
        client = Client(cluster)
    try:
        t0 = time.monotonic()
        futures = client.map(
            map_capture,
            [binary] * len(a.captures),
            [a.map_arg] * len(a.captures),
            [workdir] * len(a.captures),
            range(len(a.captures)),
            a.captures,
            pure=False,
        )
        mapped = client.gather(futures)
        t_map = time.monotonic() - t0
        paths = [p for p, _ in mapped]
        with open(paths[0], encoding="utf-8") as f:
            header = f.readline().rstrip("\n")

        t1 = time.monotonic()
        bag = db.from_sequence(list(enumerate(paths)), npartitions=max(1, len(paths)))
        groups = (
            bag.map(facts_records)
            .flatten()
            .groupby(group_key, shuffle="tasks")
            .map(write_group, workdir, header)
        )
        written = groups.compute(scheduler=client.get)
        t_group = time.monotonic() - t1
    finally:
        client.close()
        if cluster is not None:
            cluster.close()

    # Captures in the order given, each capture's groups in any order.
    written.sort()
    t2 = time.monotonic()
    out = subprocess.run(
        [binary, "--reduce", "-q", *a.reduce_arg, *[p for _, p in written]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        check=False,
    )
    t_reduce = time.monotonic() - t2
    if a.report:
        with open(a.report, "wb") as f:
            f.write(out.stdout)
    else:
        sys.stdout.buffer.write(out.stdout)
    sys.stderr.buffer.write(out.stderr)
    facts_bytes = sum(os.path.getsize(p) for p in paths)
    capture_bytes = sum(os.path.getsize(c) for c in a.captures)
    print(
        "captures: %d (%d bytes); facts: %d bytes; groups: %d; map %.2fs (task sum %.2fs), "
        "group %.2fs, reduce %.2fs"
        % (len(a.captures), capture_bytes, facts_bytes, len(written), t_map,
           sum(t for _, t in mapped), t_group, t_reduce),
        file=sys.stderr,
    )
    if a.check:
        single = subprocess.run(
            [binary, "-q", *a.map_arg, *a.reduce_arg, *a.captures],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            check=False,
        )
        same = (single.stdout, single.stderr, single.returncode) == (
            out.stdout, out.stderr, out.returncode)
        print("check: %s" % ("identical to the single run" if same else "DIFFERS from the single run"),
              file=sys.stderr)
        if not same:
            return 4
    return out.returncode


if __name__ == "__main__":
    sys.exit(main())
