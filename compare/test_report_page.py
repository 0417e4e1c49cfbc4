#!/usr/bin/python3
"""report_page.py on hand-made hold histories: a red overlap exactly where
the timeline records one, as wide as its length on the time axis, and
nowhere else; lanes named; one figure per story. No Redis needed.

usage: test_report_page.py REPORT_PAGE_PY
"""
import importlib.util
import re
import sys
import xml.etree.ElementTree as ET

spec = importlib.util.spec_from_file_location("report_page", sys.argv[1])
page = importlib.util.module_from_spec(spec)
spec.loader.exec_module(page)
import report_tables  # noqa: E402 (beside report_page.py, which put its folder on the path)

SVG = "{http://www.w3.org/2000/svg}"
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def rects(svg, cls):
    return [r for r in ET.fromstring(svg).iter(SVG + "rect") if r.get("class") == cls]


def texts(svg, cls):
    return [t.text for t in ET.fromstring(svg).iter(SVG + "text") if t.get("class") == cls]


paused = {
    "story": "paused", "title": "paused holder", "sentence": "The holder was stopped past its lease.",
    "lanes": [
        {"name": "holder", "holds": [{"start_ms": 0, "end_ms": 800}],
         "events": [{"at_ms": 5, "kind": "stop", "label": "SIGSTOP"},
                    {"at_ms": 300, "kind": "lease_end", "label": "lease ends"},
                    {"at_ms": 700, "kind": "cont", "label": "SIGCONT"}]},
        {"name": "other client", "holds": [{"start_ms": 500, "end_ms": 650}]},
    ],
    "overlaps": [{"start_ms": 500, "end_ms": 650, "lanes": ["holder", "other client"]}],
}
killed = {
    "story": "killed", "title": "killed holder", "sentence": "The holder was killed; the lock came back with its lease.",
    "lanes": [
        {"name": "holder", "holds": [{"start_ms": 0, "end_ms": 20}], "events": [{"at_ms": 20, "kind": "kill", "label": "SIGKILL"}]},
        {"name": "other client", "holds": [{"start_ms": 310, "end_ms": 330}]},
    ],
    "overlaps": [],
}

svg = page.render_timeline(paused)
scale = page.Scale(paused)
red = rects(svg, "overlap")
check(len(red) == 1, f"one red region where one overlap is recorded, not {len(red)}")
if red:
    check(abs(float(red[0].get("width")) - 150 * scale.px) < 0.01,
          f"the red region is {red[0].get('width')} px wide, not 150 ms = {150 * scale.px:.2f} px")
    check(abs(float(red[0].get("x")) - scale.x(500)) < 0.01, "the red region starts where the overlap does")
    check(float(red[0].get("data-ms")) == 150, "the red region says its length")
check(texts(svg, "overlap-label") == ["overlap 150 ms"], f"the overlap's label: {texts(svg, 'overlap-label')}")
check(texts(svg, "lane-name") == ["holder", "other client"], f"lanes named: {texts(svg, 'lane-name')}")
holds = rects(svg, "hold")
check(len(holds) == 2, "one bar per hold")
check(abs(float(holds[0].get("width")) - 800 * scale.px) < 0.01, "a hold's bar is as long as the hold")
check({e for e in texts(svg, "event")} == {"SIGSTOP", "lease ends", "SIGCONT"}, "the events are labelled")

svg = page.render_timeline(killed)
check(rects(svg, "overlap") == [], "no red region where none is recorded")
check(texts(svg, "overlap-label") == [], "no overlap label where none is recorded")

# Red follows the record, not the bars: holds that touch but are recorded
# as not overlapping get none; an overlap recorded between one lane pair
# spans those lanes only.
three = {"story": "s", "lanes": [{"name": n, "holds": [{"start_ms": a, "end_ms": b}]}
                                 for n, a, b in [("a", 0, 100), ("b", 100, 200), ("c", 150, 250)]],
         "overlaps": [{"start_ms": 150, "end_ms": 200, "lanes": ["b", "c"]}]}
svg = page.render_timeline(three)
red = rects(svg, "overlap")
check(len(red) == 1, "one overlap in three lanes")
if red:
    check(float(red[0].get("y")) > page.lane_y(1) - 0.01, "the red region starts at lane b, not a")

strip = {"story": "contention", "title": "8 workers on one lock", "sentence": "a window",
         "lanes": [{"name": f"p0.w{i}", "holds": [{"start_ms": i * 10, "end_ms": i * 10 + 8}]} for i in range(8)],
         "overlaps": []}
html = page.render_page({"faults": [{"combination": "token/fixed/spin", "timelines": [paused, killed]}],
                         "combinations": [{"name": "token/fixed/spin", "contention": [{"workers": 2},
                                                                                     {"workers": 8, "strip": strip}]}]})
check(len(re.findall(r'<figure class="story" data-story="(paused|killed)"', html)) == 2, "one figure per story")
check(len(re.findall(r'<figure class="story" data-story="contention"', html)) == 1, "one strip per combination")
check("<h4>token/fixed/spin</h4>" in html, "a strip is titled by its combination")
check(html.count('class="overlap"') == 1, "one red region on the page")
check("two holders at once." in html and "never two holders." in html, "each figure has its verdict")
check('<table class="figures">' in html and "<td>token/fixed/spin</td>" in html, "the figures' table")
plots = [("The uncontended cycle", report_tables.inline_svg('<?xml version="1.0"?>\n<!DOCTYPE svg>\n<svg id="p"></svg>'))]
with_plots = page.render_page({}, plots)
check('<figure class="plot"><h3>The uncontended cycle</h3><svg id="p"></svg></figure>' in with_plots,
      "a plot goes inline, without its XML declaration")
check("No plots: matplotlib is missing." in page.render_page({}, [], "matplotlib is missing"),
      "a page without plots says why")
fenced = dict(paused, story="paused_fenced")
fenced["lanes"] = [dict(paused["lanes"][0], events=[{"at_ms": 790, "kind": "refused", "label": "late write refused"}]),
                   paused["lanes"][1]]
check("two holders at once, but the late write was refused." in page.render_figure(fenced),
      "an overlap whose late write was refused says so")
check("<script" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', ""),
      "no script, no fetch")

# A deployment's story: its events (a failover, a node down) are lines
# across every lane, and the page gives such stories a section of their own.
failover = {"story": "failover", "title": "failover", "sentence": "A master died.",
            "lanes": [{"name": "A", "holds": [{"start_ms": 0, "end_ms": 900}], "events": []},
                      {"name": "B", "holds": [{"start_ms": 600, "end_ms": 800}], "events": []}],
            "events": [{"at_ms": 100, "kind": "failover", "label": "master killed"},
                       {"at_ms": 500, "kind": "kill", "label": "node 2 down"}],
            "overlaps": [{"start_ms": 600, "end_ms": 800, "lanes": ["A", "B"]}]}
svg = page.render_timeline(failover)
lines = [x for x in ET.fromstring(svg).iter(SVG + "line") if x.get("class") == "event-line"]
check(len(lines) == 2, f"a whole story's events are lines, not {len(lines)}")
check(all(float(x.get("y1")) < page.lane_y(0) + 3 and float(x.get("y2")) > page.lane_y(1) + page.LANE - 3
          for x in lines), "each line crosses every lane")
check(sorted(texts(svg, "event")) == ["master killed", "node 2 down"], "the story's events are labelled")
restart = dict(failover, story="restart", overlaps=[])
deployed = page.render_page({"environment": {"ping": {}}, "backends": {
    "failover": {"timelines": [failover]}, "redlock": {"restart": {"timelines": [restart]}}}})
check('<h2 id="deployments">' in deployed and 'href="#deployments"' in deployed, "a section for deployments")
check(len(re.findall(r'<figure class="story" data-story="(failover|restart)"', deployed)) == 2,
      "one figure per deployment story")
check("<h3>Sentinel: seed 003" in deployed and "<h3>Redlock: a node" in deployed, "each headed by its deployment")
check('id="deployments"' not in html, "no such section without them")
alone = page.only({"backends": {"failover": {"timelines": [failover]}}}, "deployments:failover")
check(alone.count('<figure class="story"') == 1 and "<h3>Sentinel: seed 003" in alone,
      "--only deployments:STORY draws that story under its deployment's heading")

for f in failures:
    print("FAILED:", f)
print(f"test_report_page: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
