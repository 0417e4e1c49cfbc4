#!/usr/bin/python3
"""Draws dlock-compare's hold histories as timelines: one lane per client,
each hold a bar from its acquire to its release, events (a SIGKILL, a
SIGSTOP and its SIGCONT, a lease's end, the loss signal, a refused write)
as marks on the lane, and every overlap of two holds shaded red with its
length. Plain SVG and CSS, no script: the page reads in any browser, or
none (the SVG is text).

A timeline, as dlock-compare writes it into its JSON (each entry of
"faults" has a list of them, one per story it ran):
  {"story": "paused", "title": "...", "sentence": "...",
   "lanes": [{"name": "holder", "holds": [{"start_ms": 0, "end_ms": 812}],
              "events": [{"at_ms": 5, "kind": "stop", "label": "SIGSTOP"}]}],
   "overlaps": [{"start_ms": 400, "end_ms": 812, "lanes": ["holder", "other"]}]}
Times are ms from the story's start. The overlaps are the hold-history
checker's (tests/support/hold_history.hpp), drawn where it found them and
nowhere else: the drawing computes none of its own.

The page also carries the run's tables (every combination's figures, the
fault verdicts) and its plots: plot_compare.py, found beside this file, is
run into the page's folder and its SVG files are put inline (when
python3-matplotlib is missing, the page says so and goes without them).

usage: report_page.py COMPARE_JSON OUT_HTML [--only COMBINATION:STORY,STORY...]
  --only  a page of those stories alone (README's picture is one:
          --only token/fixed/spin:paused,paused_fenced; the deployments'
          stories are under "deployments": --only deployments:failover)
"""
import html
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # report_tables.py, beside this file
from report_tables import draw_plots, render_tables  # noqa: E402

WIDTH = 760          # the SVG's width, px
GUTTER = 150         # lane names, left of the time axis
RIGHT = 24           # room right of the last hold
LANE = 34            # one lane's height
BAR = 16             # a hold's bar height
LABEL_ROW = 12       # one row of event labels
LABEL_ROWS = 3       # labels that would collide go up a row
TOP = 10 + LABEL_ROW * LABEL_ROWS  # room above the first lane, for event labels
AXIS = 44            # the time axis below the lanes, and a row for overlap labels
COLORS = ["#3b6fb6", "#3a9a5b", "#8a5cb8", "#c2842b", "#2b9aa8", "#a85a2b", "#5b6b7b", "#b83b7a"]
EVENT_MARKS = {
    # kind: (symbol, color, whole height: a line across every lane)
    "kill": ("\u2715", "#111111", False),
    "delete": ("\u26a0", "#c0392b", False),
    "stop": ("\u2016", "#111111", False),
    "cont": ("\u25b6", "#111111", False),
    "lease_end": ("\u2502", "#777777", False),
    "lost": ("\u25c6", "#d9822b", False),
    "refused": ("\u2298", "#c0392b", False),
    "release": ("\u2713", "#1b5e20", False),
    "write": ("\u270e", "#1b5e20", False),
    "skew": ("\u0394", "#111111", False),
    "failover": ("\u21c4", "#111111", True),
    "restart": ("\u21bb", "#111111", True),
}
OVERLAP_FILL = "#e53935"


def nice_step(span_ms, ticks=6):
    """A round tick step (1, 2 or 5 times a power of ten) giving about
    `ticks` ticks over `span_ms`."""
    raw = max(span_ms, 1e-9) / ticks
    power = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * power:
            return m * power
    return 10 * power


def fmt_ms(v):
    """Milliseconds as a label: '1,234 ms', '12.5 ms', '0.4 ms', '0 ms'."""
    if v == 0 or abs(v) >= 100:
        return f"{v:,.0f} ms"
    if abs(v) >= 10:
        return f"{v:.1f} ms"
    return f"{v:.2f} ms"


class Scale:
    """Maps ms to x, over the span of everything a timeline holds."""

    def __init__(self, timeline, width=WIDTH):
        times = [0.0]
        for lane in timeline["lanes"]:
            for h in lane.get("holds", []):
                times += [h["start_ms"], h["end_ms"]]
            for e in lane.get("events", []):
                times.append(e["at_ms"])
        for e in timeline.get("events", []):
            times.append(e["at_ms"])
        self.t0 = min(times)
        t1 = max(times)
        self.span = max(t1 - self.t0, 1e-6) * 1.04  # a little room after the last mark
        self.x0 = GUTTER
        self.px = (width - GUTTER - RIGHT) / self.span

    def x(self, ms):
        return self.x0 + (ms - self.t0) * self.px

    def width(self, ms):
        return ms * self.px


def lane_y(index):
    return TOP + index * LANE


def anchor_of(x, width):
    """Where a label at x hangs from: its end near the right edge, its
    start near the lane names, else its middle."""
    if x > width - RIGHT - 70:
        return "end"
    if x < GUTTER + 40:
        return "start"
    return "middle"


def anchor(x, width):
    return f'text-anchor="{anchor_of(x, width)}"'


def render_timeline(timeline, width=WIDTH):
    """One timeline as an SVG element (a string)."""
    lanes = timeline["lanes"]
    scale = Scale(timeline, width)
    height = TOP + LANE * len(lanes) + AXIS
    index = {lane["name"]: i for i, lane in enumerate(lanes)}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(timeline.get("title", ""))}">']
    # Lanes: a name and a faint band each.
    for i, lane in enumerate(lanes):
        y = lane_y(i)
        out.append(f'<rect class="band" x="{GUTTER}" y="{y}" width="{width - GUTTER - RIGHT}" height="{LANE}" '
                   f'fill="{"#f7f7f7" if i % 2 == 0 else "#ffffff"}"/>')
        out.append(f'<text class="lane-name" x="{GUTTER - 8}" y="{y + LANE / 2 + 4}" text-anchor="end" '
                   f'font-size="12">{html.escape(lane["name"])}</text>')
    # Overlaps first, under the bars: a red band over the lanes involved.
    for o in timeline.get("overlaps", []):
        rows = sorted(index[n] for n in o.get("lanes", []) if n in index) or [0, len(lanes) - 1]
        y = lane_y(rows[0]) + 2
        h = lane_y(rows[-1]) + LANE - 2 - y
        length = o["end_ms"] - o["start_ms"]
        x = scale.x(o["start_ms"])
        w = scale.width(length)
        out.append(f'<rect class="overlap" data-ms="{length:.3f}" x="{x:.2f}" y="{y}" width="{w:.2f}" height="{h}" '
                   f'fill="{OVERLAP_FILL}" fill-opacity="0.28" stroke="{OVERLAP_FILL}" stroke-width="1"/>')
        label_y = TOP + LANE * len(lanes) + AXIS - 6  # below the axis's tick labels
        out.append(f'<text class="overlap-label" x="{x + w / 2:.2f}" y="{label_y}" {anchor(x + w / 2, width)} '
                   f'font-size="11" font-weight="bold" fill="#b71c1c">overlap {fmt_ms(length)}</text>')
    # Holds: bars; a shared hold lighter.
    for i, lane in enumerate(lanes):
        color = COLORS[i % len(COLORS)]
        y = lane_y(i) + (LANE - BAR) / 2
        for h in lane.get("holds", []):
            x = scale.x(h["start_ms"])
            w = max(scale.width(h["end_ms"] - h["start_ms"]), 1.0)
            opacity = "0.55" if h.get("shared") else "0.9"
            out.append(f'<rect class="hold" data-lane="{html.escape(lane["name"])}" x="{x:.2f}" y="{y:.1f}" '
                       f'width="{w:.2f}" height="{BAR}" rx="2" fill="{color}" fill-opacity="{opacity}">'
                       f'<title>{html.escape(lane["name"])}: held {fmt_ms(h["end_ms"] - h["start_ms"])}</title></rect>')
    # Events: a mark on the lane, its label above the mark, a row higher
    # when it would run into the label before it.
    label_ends = [-1e9] * LABEL_ROWS

    def event(e, rows):
        symbol, color, across = EVENT_MARKS.get(e.get("kind"), ("\u2022", "#111111", False))
        x = scale.x(e["at_ms"])
        top = lane_y(rows[0]) + 2
        bottom = lane_y(rows[-1]) + LANE - 2
        if across or e.get("kind") == "lease_end" or len(rows) > 1:  # the whole story's: a line
            dash = ' stroke-dasharray="3,3"' if e.get("kind") == "lease_end" else ""
            out.append(f'<line class="event-line" x1="{x:.2f}" x2="{x:.2f}" y1="{top}" y2="{bottom}" '
                       f'stroke="{color}" stroke-width="1.2"{dash}/>')
        else:
            out.append(f'<text class="event-mark" x="{x:.2f}" y="{(top + bottom) / 2 + 5:.1f}" text-anchor="middle" '
                       f'font-size="14" fill="{color}">{symbol}</text>')
        label = e.get("label")
        if not label:
            return
        kind = html.escape(e.get("kind", ""))
        if rows[0] > 0 and len(rows) == 1:
            # A lane below the first: the label in its own lane, right of
            # the mark and above the bars.
            side = "end" if x > width - RIGHT - 70 else "start"
            out.append(f'<text class="event" data-kind="{kind}" x="{x + (-7 if side == "end" else 7):.2f}" '
                       f'y="{lane_y(rows[0]) + 8}" text-anchor="{side}" font-size="10" '
                       f'fill="{color}">{html.escape(label)}</text>')
            return
        # Above the first lane, a row higher when it would run into the
        # label before it (the row that frees first when none is free).
        half = len(label) * 2.9  # about half its width at 10 px
        left = {"start": x, "end": x - 2 * half}.get(anchor_of(x, width), x - half)
        row = next((r for r in range(LABEL_ROWS) if label_ends[r] < left),
                   min(range(LABEL_ROWS), key=lambda r: label_ends[r]))
        label_ends[row] = left + 2 * half + 6
        out.append(f'<text class="event" data-kind="{kind}" x="{x:.2f}" y="{top - 3 - row * LABEL_ROW}" '
                   f'{anchor(x, width)} font-size="10" fill="{color}">{html.escape(label)}</text>')

    marks = [(e, [i]) for i, lane in enumerate(lanes) for e in lane.get("events", [])]
    marks += [(e, [0, len(lanes) - 1]) for e in timeline.get("events", [])]  # the whole story's (a failover)
    for e, rows in sorted(marks, key=lambda m: m[0]["at_ms"]):
        event(e, rows)
    # The time axis.
    axis_y = TOP + LANE * len(lanes)
    out.append(f'<line x1="{GUTTER}" x2="{width - RIGHT}" y1="{axis_y}" y2="{axis_y}" stroke="#444444"/>')
    step = nice_step(scale.span)
    t = math.ceil(scale.t0 / step) * step
    while t <= scale.t0 + scale.span + 1e-9:
        x = scale.x(t)
        out.append(f'<line x1="{x:.2f}" x2="{x:.2f}" y1="{axis_y}" y2="{axis_y + 4}" stroke="#444444"/>')
        decimals = 0 if step >= 1 else max(0, -math.floor(math.log10(step)))
        out.append(f'<text class="tick" x="{x:.2f}" y="{axis_y + 16}" text-anchor="middle" font-size="10" '
                   f'fill="#444444">{t:,.{decimals}f} ms</text>')
        t += step
    out.append("</svg>")
    return "\n".join(out)


STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; color: #222; max-width: 860px; margin: 2em auto; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 2em; }
h3 { font-size: 1.05em; margin: 1.4em 0 0.3em; }
figure { margin: 0.5em 0 1.5em; }
figcaption { color: #333; max-width: 760px; }
.verdict-bad { color: #b71c1c; font-weight: bold; }
.verdict-good { color: #1b5e20; font-weight: bold; }
.verdict-mixed { color: #b45f06; font-weight: bold; }
h4 { font-size: 1em; margin: 1.2em 0 0.3em; }
table.figures { border-collapse: collapse; font-size: 13px; margin: 0.5em 0 1.5em; }
table.figures th, table.figures td { border-bottom: 1px solid #e0e0e0; padding: 2px 8px; text-align: right; }
table.figures th:first-child, table.figures td:first-child, table.figures td:nth-child(2) { text-align: left; }
figure.plot svg, svg.timeline { max-width: 100%; height: auto; }
.legend { display: flex; flex-wrap: wrap; gap: 0.3em 1.2em; }
.legend > span { white-space: nowrap; }
"""


def legend():
    marks = [("\u2715", "SIGKILL"), ("\u2016", "SIGSTOP"), ("\u25b6", "SIGCONT"), ("\u2502", "lease ends (dashed)"),
             ("\u25c6", "loss signal"), ("\u270e", "write to the store"), ("\u2298", "refused"),
             ("\u26a0", "deletes another's key"), ("\u0394", "clock skew")]
    items = "".join(f"<span>{html.escape(s)} {html.escape(t)}</span>" for s, t in marks)
    items += "<span>\u2713 released</span>"
    return (f'<p class="legend">{items}<span><span style="background:{OVERLAP_FILL};opacity:0.5">&nbsp;&nbsp;&nbsp;'
            f'</span> two holds at once</span></p>')


def render_figure(timeline):
    """A timeline with its title and the sentence that says what happened."""
    verdict = ""
    refused_late = any(e.get("kind") == "refused" and "late write" in e.get("label", "")
                       for lane in timeline.get("lanes", []) for e in lane.get("events", []))
    if "overlaps" in timeline:
        if timeline["overlaps"] and refused_late:
            verdict = '<span class="verdict-mixed">two holders at once, but the late write was refused.</span> '
        elif timeline["overlaps"]:
            verdict = '<span class="verdict-bad">two holders at once.</span> '
        else:
            verdict = '<span class="verdict-good">never two holders.</span> '

    return (f'<figure class="story" data-story="{html.escape(timeline.get("story", ""))}">'
            f'<h4>{html.escape(timeline.get("title", timeline.get("story", "")))}</h4>'
            f'{render_timeline(timeline)}'
            f'<figcaption>{verdict}{html.escape(timeline.get("sentence", ""))}</figcaption></figure>')


def deployment_stories(data):
    """(heading, timelines) for each deployment's fault story the run
    played: Sentinel's failover (--backend sentinel), Redlock's node
    restart (--backend redlock3)."""
    backends = data.get("backends") or {}
    failover = backends.get("failover") or {}
    restart = (backends.get("redlock") or {}).get("restart") or {}
    return [(heading, part["timelines"]) for heading, part in (
        ("Sentinel: seed 003's failover (token/watchdog/spin, a master and two replicas)", failover),
        ("Redlock: a node's restart (token/fixed/tryonce, three nodes without persistence)", restart))
        if part.get("timelines")]


def render_page(data, plots=(), no_plots=""):
    """The whole page for a compare.json, with `plots` (title, SVG
    element) or the reason there are none."""
    parts = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
             '<title>dlock-compare: the holds, drawn</title>', f"<style>{STYLE}</style></head><body>",
             "<h1>dlock-compare: the holds, drawn</h1>"]
    stories = {f["combination"]: f["timelines"] for f in data.get("faults", []) if f.get("timelines")}
    deployments = deployment_stories(data)
    strips = [(c["name"], r["strip"]) for c in data.get("combinations", []) for r in c.get("contention", [])
              if r.get("strip")]
    env = data.get("environment", {})
    if env:
        # A run of the backends alone measured no PING and named no server.
        version, ping = str(env.get("redis_version", "")), env.get("ping", {}).get("p50_us", 0)
        parts.append("<p>" + (f'Redis {html.escape(version)} ({html.escape(str(env.get("redis", "")))}), '
                              if version else "") +
                     f'{env.get("cpu_count", "?")} CPUs, ' + (f"PING p50 {ping:.1f} &micro;s, " if ping else "") +
                     f'dlock {html.escape(str(env.get("dlock_version", "")))} '
                     f'({html.escape(str(env.get("git_commit", "")))})'
                     f'{"" if env.get("optimized", True) else ", <b>built without optimization</b>: its speed is not dlock&#39;s"}'
                     f', {html.escape(str(env.get("depth", "")))} run.</p>')
        sections = [(anchor_id, name) for anchor_id, name, present in (
            ("faults", "fault stories", stories), ("deployments", "deployments' fault stories", deployments),
            ("contention", "contention", strips), ("figures", "figures", data.get("combinations") or data.get("faults")))
            if present]
        parts.append("<p>Sections: " + ", ".join(f'<a href="#{a}">{html.escape(n)}</a>' for a, n in sections) + ".</p>")
    def headed(groups):  # (heading, timelines): a heading, then each figure
        for heading, timelines in groups:
            parts.append(f"<h3>{html.escape(heading)}</h3>")
            parts.extend(render_figure(t) for t in timelines)

    if stories:
        parts.append('<h2 id="faults">Fault stories</h2>')
        parts.append("<p>Each client is a lane; each hold a bar from the moment its acquire was answered to the "
                     "moment its release was sent. Where two holds of one lock overlap, the overlap is red.</p>")
        parts.append(legend())
        headed(stories.items())
    if deployments:
        parts.append('<h2 id="deployments">Deployments\' fault stories</h2>')
        parts.append("<p>The same drawing for what happens to a deployment rather than to a client: a vertical line "
                     "is an event of the whole deployment (a master killed, a replica promoted, a node down or back), "
                     "drawn across every lane.</p>")
        if not stories:
            parts.append(legend())
        headed(deployments)
    if strips:
        parts.append('<h2 id="contention">Contention</h2>')
        parts.append("<p>Eight workers in two processes take one lock over and over, each holding it for a short "
                     "critical section. Each strip is a window from the middle of that run: a lane per worker. "
                     "Who gets the lock next, and how long the lock lies idle between two holders, is the wait "
                     "policy's doing: a spin's sleeps leave gaps and favour whoever polls at the right moment, "
                     "pub/sub wakes every waiter at once, a FIFO line hands the lock on in order. A lane's name is the "
                     "worker's: p1.3 is process 1, worker 3.</p>")
        for name, strip in strips:
            strip = dict(strip, title=name)
            parts.append(render_figure(strip))
    parts.append('<div id="figures"></div>')
    parts.append(render_tables(data))
    if plots or no_plots:
        parts.append("<h2>Plots</h2>")
        parts += [f'<figure class="plot"><h3>{html.escape(t)}</h3>{svg}</figure>' for t, svg in plots]
        if no_plots:
            parts.append(f"<p>No plots: {html.escape(no_plots)}.</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def only(data, spec):
    """A page of the stories `spec` names ("combination:story,story")."""
    combination, _, names = spec.partition(":")
    wanted = names.split(",")
    if combination == "deployments":  # the deployments' stories: "deployments:failover,restart"
        pool = [(heading, t) for heading, timelines in deployment_stories(data) for t in timelines]
    else:
        pool = [(combination, t) for f in data.get("faults", []) if f["combination"] == combination
                for t in f.get("timelines", [])]
    picked = [t for _, t in pool if t["story"] in wanted]
    combination = next((heading for heading, t in pool if t["story"] in wanted), combination)
    if len(picked) != len(wanted):
        raise SystemExit(f"report_page: {spec}: found {[t['story'] for t in picked]}")
    body = "\n".join(render_figure(t) for t in sorted(picked, key=lambda t: wanted.index(t["story"])))
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><style>{STYLE}</style></head><body>'
            f'<h3>{html.escape(combination)}</h3>{legend()}{body}</body></html>')


def main(argv):
    if len(argv) == 5 and argv[3] == "--only":
        with open(argv[1]) as f:
            data = json.load(f)
        with open(argv[2], "w") as f:
            f.write(only(data, argv[4]))
        return 0
    if len(argv) != 3:
        print("\n".join(__doc__.strip().splitlines()[-3:]), file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        data = json.load(f)
    # A run of the backends alone has no combinations of one server to plot.
    plots, no_plots = draw_plots(argv[1], os.path.dirname(os.path.abspath(argv[2]))) \
        if data.get("combinations") else ([], "")
    with open(argv[2], "w") as f:
        f.write(render_page(data, plots, no_plots))
    print(f"report_page: wrote {argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
