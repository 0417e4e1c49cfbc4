#!/usr/bin/python3
"""The report page's tables and plots (report_page.py puts them on the
page): every combination's figures and the fault verdicts as HTML tables,
and plot_compare.py's SVG plots, put inline."""
import html
import os
import subprocess


def cell(v, fmt="{:,.0f}"):
    return "&ndash;" if v is None else html.escape(fmt.format(v) if not isinstance(v, str) else v)


def render_tables(data):
    """The run's figures as HTML tables: each combination's, then the
    fault verdicts."""
    rows = []
    for c in data.get("combinations", []):
        by_w = {r["workers"]: r for r in c.get("contention", [])}
        w8 = by_w.get(8, {})
        rows.append("<tr>" + "".join(f"<td>{x}</td>" for x in (
            html.escape(c.get("name", "")), html.escape(c.get("reproduces", "")),
            cell(c.get("uncontended", {}).get("p50_ping"), "{:.2f}"), cell(w8.get("cycles_per_s")),
            cell(w8.get("handoffs_per_s")), cell(w8.get("commands_per_acquisition"), "{:.1f}"),
            cell(w8.get("overlaps")), cell(w8.get("lost_updates")))) + "</tr>")
    out = []
    if rows:
        out.append("<h2>Every combination</h2><p>The uncontended cycle (one acquire and one release) in PING round "
                   "trips measured in the same run; the rest from the run with 8 workers on one lock.</p>")
        out.append('<table class="figures"><tr><th>combination</th><th>reproduces</th><th>cycle p50 / PING</th>'
                   "<th>cycles/s (8 workers)</th><th>hand-offs/s</th><th>commands / acquisition</th>"
                   "<th>overlaps</th><th>lost updates</th></tr>" + "".join(rows) + "</table>")
    faults = data.get("faults", [])
    if faults:
        yes_no = {True: "yes", False: "no", None: None}
        out.append("<h2>Fault verdicts</h2>")
        out.append('<table class="figures"><tr><th>ownership / renewal</th><th>killed holder: freed after</th>'
                   "<th>paused holder: overlap</th><th>its release</th><th>late release deleted the next key</th>"
                   "<th>fast clock stole</th><th>fenced late write refused</th></tr>" + "".join(
                       "<tr>" + "".join(f"<td>{x}</td>" for x in (
                           html.escape(f["combination"].rsplit("/", 1)[0]),
                           cell(f.get("killed_freed_ms"), "{:,.0f} ms") if f.get("killed_freed_ms") is not None
                           else "never",
                           cell(yes_no[f.get("paused_overlap")]), html.escape(f.get("paused_release", "")),
                           cell(yes_no[f.get("late_release_deleted_other")]),
                           cell(yes_no[f.get("skewed_clock_stole")]),
                           cell(yes_no[f.get("fenced_late_write_refused")]))) +
                       "</tr>" for f in faults) + "</table>")
    return "\n".join(out)


def inline_svg(text):
    """A saved SVG file's text as an element to put in a page (without its
    XML declaration and doctype)."""
    at = text.find("<svg")
    return text[at:] if at >= 0 else ""


def draw_plots(json_path, out_dir):
    """Runs plot_compare.py (beside this file) into out_dir: the plots'
    titles and SVG elements, or the reason there are none."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plot_compare.py")
    if not os.path.exists(script):
        return [], "plot_compare.py is not beside report_page.py"
    try:
        r = subprocess.run(["/usr/bin/python3", script, json_path, out_dir], capture_output=True, text=True,
                           timeout=240)
    except (OSError, subprocess.TimeoutExpired) as e:
        return [], f"plot_compare.py did not run: {e}"
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no message"])[-1]
        return [], f"plot_compare.py failed ({last}); ./dev plot installs python3-matplotlib"
    plots = []
    for name, title in (("uncontended.svg", "The uncontended cycle"), ("handoff.svg", "Hand-off under contention"),
                        ("commands.svg", "Server work per acquisition")):
        path = os.path.join(out_dir, name)
        if os.path.exists(path):
            with open(path) as f:
                plots.append((title, inline_svg(f.read())))
    return plots, ""
