"""Parts of dlock-compare's run checked for check_compare.py: the phases
that measure one ownership each (permits, readers), each taking the run's
JSON, its stdout and check_compare's fail(); and the fault stories'
timelines (check_timelines, check_deployment), for the report page."""


def check_permits(data, stdout, fail):
    """The permits phase: one permit and four, each run with acquisitions,
    never more holders at once than permits, and the server's commands."""
    p = data["permits"]
    if not p or [s["permits"] for s in p["sides"]] != [1, 4] or p["workers"] != 8:
        fail(f"permits phase: {p}")
    for s in p["sides"]:
        if s["errors"] or not (s["acquisitions"] > 0 and 1 <= s["most_at_once"] <= s["permits"]
                               and s["commands_per_acquisition"] > 0):
            fail(f"permits phase, {s['permits']} permits: {s}")
    if not p["rate_pairs"] or "permits: 8 workers on one semaphore" not in stdout:
        fail(f"permits phase: no ratio, or no table: {p}")


def check_readers(data, stdout, fail):
    """The readers phase: readers shared the read-write lock (more than one
    at once), the token lock had one holder at a time, both with commands
    counted; a writer behind a stream of readers got in with its intent
    every time, and waited longer without it (the stream is meant to leave
    no gap, but a loaded machine may open one)."""
    p = data["readers"]
    if not p or p["workers"] != 4:
        fail(f"readers phase: {p}")
    sh, ex = p["shared"], p["exclusive"]
    for s in (sh, ex):
        if s["errors"] or not (s["acquisitions"] > 0 and s["commands_per_acquisition"] > 0):
            fail(f"readers phase: {s}")
    if not (sh["most_at_once"] > 1 and ex["most_at_once"] == 1):
        fail(f"readers phase: readers did not share, or the token lock had two holders: {p}")
    w = p["writer"]
    if (not w["with_intent_ms"] or w["gave_up_with"] != 0
            or max(w["without_intent_ms"]) < max(w["with_intent_ms"])):
        fail(f"readers phase, the writer behind readers: {w}")
    if not p["rate_pairs"] or "readers: 4 workers" not in stdout:
        fail(f"readers phase: no ratio, or no table: {p}")


def check_timelines(pair, f, fail):
    """Each story the entry ran has its timeline, drawn from its own
    holds: lanes with holds, and overlaps exactly where the verdicts say."""
    stories = [t["story"] for t in f.get("timelines", [])]
    fenced = f["fenced_late_write_refused"] is not None
    expected = ["killed", "paused"] + (["paused_fenced"] if fenced else []) + \
        (["late"] if f["late_release_deleted_other"] is not None else []) + \
        (["skew"] if f["skewed_clock_stole"] is not None else [])
    fences = f["ownership"] in ("token", "hash", "queue", "semaphore", "rw") and f["renewal"] != "none"
    if fenced != fences or (fences and f["fenced_late_write_refused"] is not True):
        fail(f"{pair}: the fenced pause: late write refused {f['fenced_late_write_refused']}, expected "
             f"{True if fences else None}")
    if stories != expected:
        fail(f"{pair}: timelines {stories}, expected {expected}")
    for t in f.get("timelines", []):
        if not t["sentence"] or not t["lanes"] or not any(lane["holds"] for lane in t["lanes"]):
            fail(f"{pair}: the {t['story']} timeline has no sentence or no holds: {t}")
        for lane in t["lanes"]:
            for h in lane["holds"]:
                if not 0 <= h["start_ms"] <= h["end_ms"]:
                    fail(f"{pair}: a hold in {t['story']} ends before it starts: {h}")
        mine = overlaps_of(t)
        if len(mine) != len(t["overlaps"]) or any(abs(a[0] - o["start_ms"]) > 0.01 or abs(a[1] - o["end_ms"]) > 0.01
                                                  for a, o in zip(mine, t["overlaps"])):
            fail(f"{pair}: the {t['story']} timeline records overlaps {t['overlaps']}, its holds make {mine}")
        overlapped = bool(t["overlaps"])
        verdict = {"killed": False, "paused": f["paused_overlap"], "paused_fenced": True, "late": True,
                   "skew": f["skewed_clock_stole"]}[t["story"]]
        kinds = [e["kind"] for lane in t["lanes"] for e in lane["events"]]
        if t["story"] == "paused_fenced" and "refused" not in kinds:
            fail(f"{pair}: the fenced pause's timeline does not mark the refused write: {kinds}")
        if overlapped != verdict:
            fail(f"{pair}: the {t['story']} timeline's overlaps {t['overlaps']} disagree with its verdict {verdict}")


def check_deployment(name, part, expected, out, fail):
    """A deployment's fault story (Sentinel's failover, Redlock's restart)
    drawn: one timeline per act in `expected` (story: whether it
    overlaps), each with the deployment's own events across its lanes,
    overlaps that its holds make and its verdict says, and a figure on the
    run's page (report.html in `out`)."""
    import os
    timelines = part.get("timelines", [])
    if [t["story"] for t in timelines] != list(expected):
        fail(f"{name}: timelines {[t['story'] for t in timelines]}, expected {list(expected)}")
    for t in timelines:
        whole = [e["kind"] for e in t.get("events", [])]
        if not t["sentence"] or not whole or not set(whole) <= {"failover", "kill", "restart"}:
            fail(f"{name}: the {t['story']} timeline has no sentence or no deployment events: {t}")
        mine = overlaps_of(t)
        if [(round(a, 2), round(b, 2)) for a, b in mine] != [(round(o["start_ms"], 2), round(o["end_ms"], 2))
                                                            for o in t["overlaps"]]:
            fail(f"{name}: the {t['story']} timeline records overlaps {t['overlaps']}, its holds make {mine}")
        if bool(t["overlaps"]) != expected.get(t["story"]):
            fail(f"{name}: the {t['story']} timeline's overlaps {t['overlaps']} disagree with the story's counts")
        a_events = [e["kind"] for lane in t["lanes"] if lane["name"] == "A" for e in lane["events"]]
        if t["story"] in ("failover_acknowledged", "failover_fenced") and "refused" not in a_events:
            fail(f"{name}: {t['story']} does not mark what was refused: {a_events}")
    page = open(os.path.join(out, "report.html")).read()
    drawn = sum(page.count(f'<figure class="story" data-story="{story}"') for story in expected)
    if 'id="deployments"' not in page or drawn != len(expected):
        fail(f"{name}: the page draws {drawn} of its {len(expected)} stories")


def check_report_page(data, out, stderr, fail):
    """The run drew itself: report.html beside compare.json, one figure per
    story, a red region per overlap the JSON records and no other, no
    script."""
    import os
    path = os.path.join(out, "report.html")
    if not os.path.exists(path) or f"wrote {path}" not in stderr:
        fail(f"no report page at {path}, or the run did not say so")
    page = open(path).read()
    stories = [t for f in data["faults"] for t in f["timelines"]]
    strips = [r["strip"] for c in data["combinations"] for r in c["contention"] if r.get("strip")]
    if len(strips) != len(data["combinations"]) or any(len(s["lanes"]) != 8 for s in strips):
        fail(f"contention strips: {len(strips)} for {len(data['combinations'])} combinations, each of 8 lanes")
    overlaps = sum(len(t["overlaps"]) for t in stories + strips)
    figures = page.count('<figure class="story"')
    red = page.count('class="overlap"')
    if figures != len(stories) + len(strips) or red != overlaps:
        fail(f"report page: {figures} figures and {red} red regions, expected {len(stories) + len(strips)} "
             f"and {overlaps}")
    if "<script" in page:
        fail("report page: it has a script")


def overlaps_of(timeline):
    """The overlaps of a timeline's holds, found here from the holds alone
    (as the hold-history checker finds them: in start order, each hold that
    starts before the latest end so far), to check the ones it records."""
    holds = sorted((h["start_ms"], h["end_ms"]) for lane in timeline["lanes"] for h in lane["holds"])
    found, latest = [], None
    for start, end in holds:
        if latest is not None and start < latest:
            found.append((start, min(latest, end)))
        latest = end if latest is None else max(latest, end)
    return found
