#!/usr/bin/env python3
"""Runs `dlock-compare --quick` and checks its JSON: every combination of
`--list` present once, with measured figures and a complete environment,
and redis-py's Lock measured beside them.
Also checks that a bad option and an unreachable --redis fail with one
clear line and a non-zero exit.

Then draws the plots from that JSON with PLOT_SCRIPT and checks the SVG
files: well-formed, with their axis labels.

usage: check_compare.py DLOCK_COMPARE OUT_DIR PLOT_SCRIPT
"""
import check_phases
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "support"))
from private_redis import private_redis, tls_ca  # noqa: E402


def fail(msg):
    print("check_compare: " + msg, file=sys.stderr)
    sys.exit(1)


def one_line_failure(exe, args, code, contains):
    r = subprocess.run([exe] + args, capture_output=True, text=True, timeout=60)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    if r.returncode != code:
        fail(f"{args}: exit {r.returncode}, expected {code}; stderr: {r.stderr!r}")
    if len(lines) != 1 or contains not in lines[0]:
        fail(f"{args}: expected one line containing {contains!r}, got {r.stderr!r}")


def check_shared_server(exe, out):
    """With --redis, the run touches only its own keys and deletes them all
    (the locks and their marker keys)."""
    with private_redis() as (port, cli):
        subprocess.run(cli + ["SET", "someone:else", "1"], check=True, capture_output=True)
        r = subprocess.run([exe, "--redis", f"redis://127.0.0.1:{port}", "--quick", "--filter", "token",
                            "--out", out], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            fail(f"--redis run exited {r.returncode}: {r.stderr}")
        keys = subprocess.run(cli + ["KEYS", "*"], capture_output=True, text=True).stdout.split()
        if keys != ["someone:else"]:
            fail(f"--redis left keys behind or touched others: {keys[:5]} ({len(keys)} keys)")


def check_faults(data):
    """The verdicts the designs must give (see docs/algorithms.md)."""
    faults = {f"{f['ownership']}/{f['renewal']}": f for f in data["faults"]}
    pairs = {f"{c['ownership']}/{c['renewal']}" for c in data["combinations"]}
    if set(faults) != pairs:
        fail(f"fault stories for {sorted(faults)}, expected {sorted(pairs)}")
    for pair, f in faults.items():
        freed = f["killed_freed_ms"]
        if f["renewal"] == "none":
            if freed is not None:  # A1 and A2n: a crashed holder keeps the lock
                fail(f"{pair}: a killed holder's unleased lock was freed after {freed} ms")
        else:
            # Within its lease, plus one renewal period under the watchdog,
            # plus slack for the waiter's own polling and a loaded machine.
            bound = f["lease_ms"] + f["period_ms"] + 600
            if freed is None or freed > bound:
                fail(f"{pair}: a killed holder's lock was freed after {freed} ms, bound {bound} ms")
        late = f["late_release_deleted_other"]
        if f["renewal"] == "fixed":
            if f["ownership"] in ("token", "hash", "getset", "queue", "semaphore", "rw") and late is not False:
                fail(f"{pair}: a late release deleted the next owner's key ({late})")
            if f["ownership"] in ("setnx", "naive") and late is not True:
                fail(f"{pair}: a late release by an unchecked DEL should delete the next owner's key ({late})")
        elif late is not None:
            fail(f"{pair}: late release is not applicable to {f['renewal']}, got {late}")
        skew = f["skewed_clock_stole"]
        if f["ownership"] in ("getset", "naive"):
            if skew is not True:  # A3's flaw: a fast clock sees a live lock as expired
                fail(f"{pair}: a client with a fast clock did not steal the live lock ({skew})")
        elif skew is not None:
            fail(f"{pair}: the skewed-clock story is for locks that store a time, got {skew}")
        if f["renewal"] != "none" and not (f["paused_other_acquired"] and f["paused_overlap"]):
            # No lease survives a paused holder: the next holder gets in, and both work.
            fail(f"{pair}: the paused holder's story did not end in an overlap: {f}")
        check_phases.check_timelines(pair, f, fail)


def check_tls(exe, out):
    """--backend tls: the PING row first, then each combination's cycle
    over plain TCP and TLS with the ratio; and --redis rediss://... runs
    the main table over TLS, redis-py's reference too."""
    r, data = run_backend(exe, "tls", "token/fixed/", out)
    t = data["backends"]["tls"]
    if not t or not t["deployment"]:
        fail(f"no TLS part: {data['backends']}")
    names = [row["name"] for row in t["rows"]]
    if names != ["PING", "token/fixed/tryonce", "token/fixed/spin", "token/fixed/backoff"]:
        fail(f"TLS rows {names}")
    for row in t["rows"]:
        if not (row["plain"]["samples"] > 0 and row["tls"]["samples"] > 0 and row["tls_vs_plain"] > 0):
            fail(f"TLS row looks wrong: {row}")
    if "TLS: one redis-server" not in r.stdout:
        fail("the table has no TLS figures")
    with private_redis(tls=True) as (port, cli):
        url = f"rediss://127.0.0.1:{port}?ca_file={tls_ca(cli)}"
        r = subprocess.run([exe, "--redis", url, "--quick", "--filter", "token/fixed/spin", "--out", out + "-over"],
                           capture_output=True, text=True, timeout=180)
        if r.returncode != 0:
            fail(f"--redis rediss:// exited {r.returncode}: {r.stderr}")
        with open(os.path.join(out + "-over", "compare.json")) as f:
            over = json.load(f)
        if not over["environment"]["redis"].startswith("rediss://127.0.0.1:"):
            fail(f"--redis rediss:// target: {over['environment']['redis_target']}")
        if "skipped" in over["reference"]:
            fail(f"redis-py's Lock was not measured over TLS: {over['reference']['skipped']}")


def check_reference(data, table):
    """redis-py's Lock ran through the same phases (./dev installs
    python3-redis, so a skipped reference is a failure here) and, being an
    owner-checked lock, neither overlapped nor lost an update."""
    ref = data["reference"]
    if "skipped" in ref:
        fail(f"redis-py's Lock was not measured: {ref['skipped']}")
    u = ref["uncontended"]
    if not (u["samples"] > 0 and 0 < u["p50_us"] <= u["p99_us"] and ref["ping"]["samples"] > 0):
        fail(f"redis-py's uncontended figures look wrong: {u}")
    check_yardstick(data)
    if [x["workers"] for x in ref["contention"]] != [2, 8]:
        fail(f"redis-py's contention runs are {[x['workers'] for x in ref['contention']]}, expected [2, 8]")
    for x in ref["contention"]:
        if x["errors"] or not x["cycles"] > 0 or x["overlaps"] or x["lost_updates"]:
            fail(f"redis-py's contention with {x['workers']} workers looks wrong: {x}")
    if "redis-py/Lock" not in table or "against redis-py's Lock (" + ref["version"] + ")" not in table:
        fail("the table has no redis-py row or no comparison with it")


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def check_yardstick(data):
    """Every ratio between rows compares times measured the same way: the
    reference's cycles are PINGed as the rows' are (one PING after each
    cycle, through the same path), so its PING median is close to theirs;
    and every row's rate against redis-py is the median of at least three
    alternating pairs. (Not compared with the ratio of the two rows' overall
    medians: on a loaded machine blocks minutes apart differ, which is why
    the pairs are taken at the same moments.)"""
    ref = data["reference"]
    rows = data["combinations"]
    ping_rows = median([c["ping"]["p50_us"] for c in rows])
    ping_ref = ref["ping"]["p50_us"]
    if not (ping_rows > 0 and ping_ref > 0 and max(ping_rows, ping_ref) / min(ping_rows, ping_ref) <= 1.5):
        fail(f"the reference's PING ({ping_ref:.1f} us) and the rows' ({ping_rows:.1f} us) were not measured "
             "the same way: more than 1.5x apart")
    if ref["ping"]["samples"] != ref["uncontended"]["samples"]:
        fail(f"the reference has {ref['ping']['samples']} PINGs for {ref['uncontended']['samples']} cycles")
    for c in rows:
        vs = c.get("vs_reference")
        if not vs or len(vs["pairs"]) < 3:
            fail(f"{c['name']}: its rate against redis-py is not from at least 3 alternating pairs: {vs}")
        if not all(p > 0 for p in vs["pairs"]) or abs(vs["rate_ratio"] - median(vs["pairs"])) > 0.002:
            fail(f"{c['name']}: rate ratio {vs['rate_ratio']} is not the median of its pairs {vs['pairs']}")


def check_plots(script, out):
    """The plot script draws three SVG files from the run's JSON."""
    r = subprocess.run([script, os.path.join(out, "compare.json")], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        fail(f"{script} exited {r.returncode}: {r.stderr[-2000:]}")
    labels = {"uncontended.svg": "in PING round trips", "handoff.svg": "waiters on one lock",
              "commands.svg": "Redis commands per acquisition"}
    for name, label in labels.items():
        path = os.path.join(out, name)
        if path not in r.stdout.split():
            fail(f"{script} did not say it wrote {path}: {r.stdout!r}")
        text = "".join(ET.parse(path).getroot().itertext())
        if label not in text:
            fail(f"{name} has no label {label!r}")


def run_backend(exe, backend, pattern, out):
    """A quick run of --backend `backend` on the combinations matching
    `pattern`: its completed process and its JSON."""
    r = subprocess.run([exe, "--backend", backend, "--quick", "--filter", pattern, "--out", out],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        fail(f"--backend {backend} exited {r.returncode}: {r.stderr}")
    with open(os.path.join(out, "compare.json")) as f:
        return r, json.load(f)


def check_backends(exe, out):
    """--backend sentinel: the owner-checked rows have a cycle with and
    without acknowledgement, each ratio from alternating pairs; the failover
    story's counts are what the designs promise. Plain combinations only
    (the story and the deployment take the time)."""
    r, data = run_backend(exe, "sentinel", "watchdog/spin", out)
    b = data["backends"]
    if b["names"] != ["sentinel"] or not b["deployment"]:
        fail(f"backends names/deployment: {b['names']} {b['deployment']!r}")
    names = sorted(row["name"] for row in b["rows"])
    if names != ["hash/watchdog/spin", "rw/watchdog/spin", "semaphore/watchdog/spin", "token/watchdog/spin"]:
        fail(f"backend rows {names}")
    for row in b["rows"]:
        for side in ("single", "sentinel", "sentinel_acknowledged"):
            if not (row[side]["samples"] > 0 and row[side]["p50_us"] > 0):
                fail(f"{row['name']}: no {side} cycles: {row}")
        if not (row["sentinel_vs_single"] > 0 and row["acknowledged_vs_single"] > 0):
            fail(f"{row['name']}: ratios missing: {row}")
    f = b["failover"]
    runs = f["runs"]
    if not (runs >= 1 and f["reproduced_overlaps"] == runs and f["prevented_overlaps"] == 0
            and f["prevented_b_alone"] == runs and f["fenced_late_refused"] == runs):
        fail(f"the failover story's counts: {f}")
    if "fault: seed 003's failover" not in r.stdout:
        fail("the table has no failover row")
    check_phases.check_deployment("failover", f, {"failover": True, "failover_acknowledged": False,
                                                  "failover_fenced": True}, out, fail)


def check_cluster(exe, out):
    """--backend cluster: each row has its cycle on both backends and its
    hand-off ratios from alternating runs, no overlap on the cluster for
    owner-checked ownerships; pub/sub rows for both modes; the many-locks
    rates for one master and three. The watchdog combinations keep it
    short."""
    listed = subprocess.run([exe, "--list", "--filter", "watchdog/"], capture_output=True, text=True,
                            check=True).stdout
    expected = sorted(l.split("\t")[0] for l in listed.splitlines() if l.strip())
    r, data = run_backend(exe, "cluster", "watchdog/", out)
    c = data["backends"]["cluster"]
    if not c or not c["deployment"]:
        fail(f"no cluster part: {data['backends']}")
    names = sorted(row["name"] for row in c["rows"])
    if names != expected or len(names) < 5:
        fail(f"cluster rows {names}, expected {expected}")
    for row in c["rows"]:
        for side in ("single", "cluster", "cluster_without_replicas"):
            if not (row[side]["samples"] > 0 and row[side]["p50_us"] > 0):
                fail(f"{row['name']}: no {side} cycles: {row}")
        # A quick run's contended phase lasts 0.25 s: a spinning or backing
        # off lock may go the whole of it without changing hands, on either
        # backend (one worker takes it again and again). The rate ratio exists
        # whenever one server handed off (it is 0 when the cluster did not);
        # a lock that wakes its waiters (pub/sub, hand-off) must change hands
        # on both.
        single_handed_off = row["single_contended"]["handoffs_per_s"] > 0
        cluster_handed_off = row["cluster_contended"]["handoffs_per_s"] > 0
        wakes = row["name"].rsplit("/", 1)[-1] in ("pubsub", "handoff")
        if wakes and not (single_handed_off and cluster_handed_off):
            fail(f"{row['name']}: a waking lock did not change hands: {row}")
        if not (row["cycle_vs_single"] > 0 and row["without_replicas_vs_single"] > 0 and row["workers"] == 8):
            fail(f"{row['name']}: ratios missing: {row}")
        if single_handed_off and not (row["handoff_rate_pairs"]
                                      and (row["handoff_rate_vs_single"] > 0 or not cluster_handed_off)):
            fail(f"{row['name']}: hand-off ratio missing: {row}")
        for side in ("single_contended", "cluster_contended"):
            x = row[side]
            if x["errors"] or not x["cycles"] > 0 or x["overlaps"] or x["lost_updates"]:
                fail(f"{row['name']}: {side} looks wrong: {x}")
    modes = sorted((p["mode"], p["workers"]) for p in c["pubsub"])
    if modes != [("classic", 8), ("sharded", 8)]:
        fail(f"pub/sub rows {modes}")
    for p in c["pubsub"]:
        if p["errors"] or not p["cycles"] > 0 or not p["commands_per_acquisition"] > 0:
            fail(f"pub/sub row looks wrong: {p}")
    by_mode = {p["mode"]: p for p in c["pubsub"]}
    # Classic PUBLISH crosses the bus to every other node; sharded only to
    # the shard's replica.
    if not by_mode["classic"]["bus_messages_per_acquisition"] > by_mode["sharded"]["bus_messages_per_acquisition"]:
        fail(f"classic pub/sub sent no more bus messages than sharded: {c['pubsub']}")
    m = c["many_locks"]
    if m["errors"] or not (m["one_master_per_s"] and m["three_masters_per_s"] and m["three_over_one"] > 0):
        fail(f"many locks: {m}")
    if "many locks:" not in r.stdout or "pub/sub waiting on the cluster" not in r.stdout:
        fail("the table has no cluster figures")


def check_redlock(exe, out):
    """--backend redlock3: each combination a quorum allows that the filter
    keeps has its cycle on one server and on three nodes, a contended run
    on each without overlap or lost update; the fault rows say what the
    design promises: locking goes on with a node dead, a majority dead is
    no_quorum with nothing left held, every vote succeeds with a node
    stalled (each waiting out the reply timeout), and the restart story
    overlaps at once and not when delayed."""
    r, data = run_backend(exe, "redlock3", "token/fixed/", out)
    q = data["backends"]["redlock"]
    if not q or q["sizes"] != [3] or not q["deployment"]:
        fail(f"no redlock part: {data['backends']}")
    names = sorted(row["name"] for row in q["rows"])
    if names != ["token/fixed/backoff", "token/fixed/spin", "token/fixed/tryonce"]:
        fail(f"redlock rows {names}")
    for row in q["rows"]:
        [three] = row["quorums"]
        if not (row["single"]["samples"] > 0 and three["nodes"] == 3 and three["cycle"]["samples"] > 0
                and three["cycle_vs_single"] > 0 and row["workers"] == 8):
            fail(f"{row['name']}: cycles or ratios missing: {row}")
        for x in (row["single_contended"], three["contended"]):
            if x["errors"] or not x["cycles"] > 0 or x["overlaps"] or x["lost_updates"]:
                fail(f"{row['name']}: a contended run looks wrong: {x}; dlock-compare's stderr ends: "
                     f"{r.stderr[-1500:]!r}")
        # Every node runs the try: three nodes cost more commands than one.
        if not three["commands_per_acquisition"] > row["single_commands_per_acquisition"] > 0:
            fail(f"{row['name']}: commands per acquisition: {row}")
    [loss] = q["node_loss"]
    if not (loss["runs"] == 1 and [len(k) for k in loss["death_to_acquire_ms"]] == [1]
            and loss["majority_lost_refused"] == 1 and loss["left_held"] == 0):
        fail(f"the killed-nodes row: {loss}; dlock-compare's stderr ends: {r.stderr[-1500:]!r}")
    [stall] = q["stalled"]
    if not (stall["acquired"] == stall["attempts"] > 0 and stall["errors"] == 0
            and stall["stalled_acquire"]["p50_us"] >= 900 * stall["reply_timeout_ms"]):
        fail(f"the stalled-node row: {stall}")
    s = q["restart"]
    if not (s["runs"] == 1 and s["at_once_overlaps"] == 1 and s["delayed_overlaps"] == 0 and s["delayed_b_held"] == 1):
        fail(f"the restart story's counts: {s}")
    check_phases.check_deployment("restart", s, {"restart": True, "restart_delayed": False}, out, fail)
    if "fault: the restart story" not in r.stdout or "token/fixed/spin" not in r.stdout:
        fail("the table has no Redlock figures")


def check_renewals(data, stdout):
    """The renewal phase: the default lock held 2,000 times, renewed in
    batches and one call per lock in alternating windows; counts, not
    speed (the ratios only have to exist)."""
    rn = data.get("renewals")
    if not rn or [row["locks"] for row in rn["rows"]] != [2000] or rn["batch_limit"] != 100:
        fail(f"renewals: {rn}")
    for row in rn["rows"]:
        b, one = row["batched"], row["single"]
        if row["lost"] or not (b["renewed"] >= 2000 and one["renewed"] >= 2000):
            fail(f"renewals: a lock lost, or too few renewed: {row}")
        # Up to 100 locks a call, where the single side sends one each.
        if not (b["calls"] * 50 <= b["renewed"] and one["calls"] == one["renewed"]):
            fail(f"renewals: calls per lock wrong: {row}")
        if not (b["pexpires"] > 0 and one["pexpires"] > 0 and b["script_us_per_lock"] > 0
                and one["script_us_per_lock"] > 0 and row["script_batched_vs_single"] > 0
                and row["cpu_batched_vs_single"] > 0):
            fail(f"renewals: figures missing: {row}")
    if "held locks (Lock<>" not in stdout:
        fail("the table has no held-locks figures")


def main():
    exe, out, plot = sys.argv[1], sys.argv[2], sys.argv[3]
    listed = subprocess.run([exe, "--list"], capture_output=True, text=True, check=True).stdout
    names = [l.split("\t")[0] for l in listed.splitlines() if l.strip()]
    if len(names) < 20 or len(set(names)) != len(names):
        fail(f"--list gave {len(names)} names, with duplicates: {names}")

    r = subprocess.run([exe, "--quick", "--out", out], capture_output=True, text=True, timeout=420)
    if r.returncode != 0:
        fail(f"--quick exited {r.returncode}: {r.stderr}")
    if "[1/" not in r.stderr:
        fail("no progress on stderr")
    with open(os.path.join(out, "compare.json")) as f:
        data = json.load(f)

    env = data["environment"]
    for key in ("redis_version", "compiler", "dlock_version", "git_commit"):
        if not env.get(key):
            fail(f"environment.{key} is empty")
    if not env["cpu_count"] > 0 or not env["ping"]["p50_us"] > 0:
        fail(f"environment figures missing: {env}")
    # A build that only tests dlock-compare (./dev test's) is not optimized,
    # and must say so where the figures are read.
    if not isinstance(env.get("optimized"), bool):
        fail(f"environment.optimized is not true or false: {env}")
    if env["optimized"] == ("built without optimization" in r.stdout):
        fail(f"environment.optimized is {env['optimized']}, and the table's warning says otherwise")

    got = [c["name"] for c in data["combinations"]]
    if sorted(got) != sorted(names):
        fail(f"combinations differ from --list: missing {set(names) - set(got)}, extra {set(got) - set(names)}")
    for c in data["combinations"]:
        u = c["uncontended"]
        if not (u["samples"] > 0 and 0 < u["p50_us"] <= u["p99_us"] and u["p50_ping"] > 0):
            fail(f"{c['name']}: uncontended figures look wrong: {u}")
        if not c["reproduces"] or c["reproduces"] == "custom":
            fail(f"{c['name']}: says it reproduces {c['reproduces']!r}")
        if c["name"] not in r.stdout:
            fail(f"{c['name']} is not in the table on stdout")
        runs = c["contention"]
        if [x["workers"] for x in runs] != [2, 8]:
            fail(f"{c['name']}: quick contention runs are {[x['workers'] for x in runs]}, expected [2, 8]")
        for x in runs:
            if x["errors"] or not x["cycles"] > 0 or not x["fewest"] <= x["most"]:
                fail(f"{c['name']}: contention with {x['workers']} workers looks wrong: {x}")
            if not (x["commands_per_acquisition"] > 0 and x["server_cpu_us_per_acquisition"] > 0):
                fail(f"{c['name']}: no server cost with {x['workers']} workers: {x}")
            # The same count command by command: the critical section's GET
            # and SET are in it, and nothing else may be missing.
            by_name = x.get("commands_by_name", {})
            if not (by_name.get("get", 0) >= 1 and by_name.get("set", 0) >= 1
                    and abs(sum(by_name.values()) - 2 - x["commands_per_acquisition"]) < 0.05):
                fail(f"{c['name']}: commands by name do not add up with {x['workers']} workers: {x}")
            # Owner-checked designs must exclude: no overlapping holds, no lost update.
            if c["ownership"] in ("token", "hash", "queue", "semaphore", "rw") and (x["overlaps"] or x["lost_updates"]):
                fail(f"{c['name']}: {x['overlaps']} overlaps, {x['lost_updates']} lost updates with {x['workers']} workers")

    check_reference(data, r.stdout)
    check_faults(data)
    check_renewals(data, r.stdout)
    check_phases.check_permits(data, r.stdout, fail)
    check_phases.check_readers(data, r.stdout, fail)
    check_phases.check_report_page(data, out, r.stderr, fail)
    check_plots(plot, out)
    check_shared_server(exe, out + "-shared")
    check_backends(exe, out + "-backends")
    check_cluster(exe, out + "-cluster")
    check_tls(exe, out + "-tls")
    check_redlock(exe, out + "-redlock")
    one_line_failure(exe, ["--backend", "redlock"], 2,
                     "--backend is a comma list of single, sentinel, cluster, tls, redlock3 and redlock5")
    one_line_failure(exe, ["--bogus"], 2, "unknown option '--bogus'")
    one_line_failure(exe, ["--filter", "no-such-lock"], 2, "no combination matches")
    one_line_failure(exe, ["--seconds", "0"], 2, "--seconds needs a number of seconds")
    one_line_failure(exe, ["--seconds", "1x"], 2, "--seconds needs a number of seconds")
    one_line_failure(exe, ["--redis", "redis://127.0.0.1:1", "--filter", "token/fixed/spin"], 1, "dlock-compare:")
    one_line_failure(exe, ["--redis", "http://x"], 1, "--redis")
    print(f"check_compare: {len(got)} combinations, PING p50 {env['ping']['p50_us']:.1f} us")


if __name__ == "__main__":
    main()
