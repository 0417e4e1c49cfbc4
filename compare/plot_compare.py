#!/usr/bin/python3
"""Draws dlock-compare's plots from its JSON, as SVG files beside it:
  uncontended.svg  acquire + release time per combination (p50, p99)
  handoff.svg      hand-off latency by number of waiters, per wait policy
  commands.svg     Redis commands per acquisition by number of waiters
Every time is in PING round trips measured in the same run. redis-py's
Lock, measured in the same run as a reference, has a grey bar and a panel
of its own.

usage: plot_compare.py [COMPARE_JSON [OUT_DIR]]
  (defaults: compare-out/compare.json, and the JSON's directory)

It needs Debian's python3-matplotlib (`./dev plot` installs it), hence
/usr/bin/python3 rather than whatever python3 comes first on PATH.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402 (after choosing the back end)
from matplotlib.ticker import FuncFormatter, LogLocator  # noqa: E402

plt.rcParams.update({
    "svg.fonttype": "none",  # text stays text: smaller files, searchable
    "font.size": 9,
    "axes.grid": True,
    "grid.color": "#dddddd",
    "figure.facecolor": "white",
    "axes.facecolor": "white",
})

WAITS = ["tryonce", "spin", "backoff", "pubsub", "handoff"]
WAIT_TITLES = {
    "tryonce": "try once (caller retries every ms)",
    "spin": "fixed-interval spin",
    "backoff": "backoff with jitter",
    "pubsub": "pub/sub wake-up",
    "handoff": "FIFO hand-off",
}
REFERENCE = "redis-py Lock (reference)"
REFERENCE_COLOR = "#222222"  # near black, hatched bars: apart from the pairs' colors


def reference_of(data):
    """redis-py's Lock measured in the same run, or None (older files, or
    a run where it could not be measured)."""
    ref = data.get("reference")
    return ref if ref and "uncontended" in ref else None
MARKERS = "os^vD<>ph*"


def pairs_of(combos):
    """Ownership/renewal pairs in list order, each with a fixed color and marker."""
    pairs = []
    for c in combos:
        p = f"{c['ownership']}/{c['renewal']}"
        if p not in pairs:
            pairs.append(p)
    # tab20's strong colors first (tab10's), then its light ones; the marker
    # shifts at each round so that no two pairs look alike.
    cmap = plt.get_cmap("tab20")
    return {p: (cmap((2 * i) % 20 + (i // 10) % 2), MARKERS[(i + i // 10) % len(MARKERS)])
            for i, p in enumerate(pairs)}


def footer(fig, env):
    fig.text(0.01, 0.005,
             f"dlock {env['dlock_version']} ({env['git_commit']}), backend: one Redis server, Redis {env['redis_version']}, "
             f"{env['cpu_count']} CPUs, {env['depth']} run; PING p50 {env['ping']['p50_us']:.1f} us",
             fontsize=7, color="#555555")


def plot_uncontended(data, style, path):
    combos = list(data["combinations"])
    ref = reference_of(data)
    if ref:
        combos.append(ref)
    ping = data["environment"]["ping"]["p50_us"]
    fig, ax = plt.subplots(figsize=(7.5, 0.22 * len(combos) + 1.4))
    names = [REFERENCE if c is ref else c["name"] for c in combos]
    y = list(range(len(combos)))[::-1]
    for yi, c in zip(y, combos):
        color = REFERENCE_COLOR if c is ref else style[f"{c['ownership']}/{c['renewal']}"][0]
        u = c["uncontended"]
        # In the PINGs measured beside the cycles (the run's PING for older files).
        ax.barh(yi, u.get("p50_ping", u["p50_us"] / ping), color=color, height=0.7,
                hatch="///" if c is ref else None, edgecolor="white" if c is ref else None)
        ax.plot([u.get("p99_ping", u["p99_us"] / ping)], [yi], marker="|", markersize=9, color="#333333")
    ax.axvline(2.0, color="#888888", linestyle="--", linewidth=1)
    ax.text(2.0, -0.6, " two round trips", color="#555555", fontsize=7, va="bottom")
    ax.set_yticks(y)
    ax.set_yticklabels(names, fontfamily="monospace")
    ax.set_ylim(-0.7, len(combos) - 0.1)
    ax.set_xlabel("uncontended acquire + release, in PING round trips (bar: p50, tick: p99)")
    ax.set_title("Uncontended cycle per combination")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    footer(fig, data["environment"])
    fig.savefig(path)
    plt.close(fig)


def plot_by_waiters(data, style, path, value, ylabel, title):
    """One panel per wait policy, and one for the reference; one line per
    ownership/renewal pair."""
    combos = data["combinations"]
    ref = reference_of(data)
    fig, axes = plt.subplots(2, 3, figsize=(12, 6.5), sharex=True, sharey=True)
    drawn = {}
    panels = [(w, WAIT_TITLES.get(w, w), [c for c in combos if c["wait"] == w]) for w in WAITS]
    panels.append(("reference", REFERENCE + ",\nits default 0.1 s sleep between tries", [ref] if ref else []))
    for ax, (wait, heading, members) in zip(axes.flat, panels):
        for c in members:
            pair = REFERENCE if c is ref else f"{c['ownership']}/{c['renewal']}"
            points = [(r["workers"], value(r)) for r in c["contention"]]
            points = [(w, v) for w, v in points if v is not None and v > 0]
            if not points:
                continue
            color, marker = (REFERENCE_COLOR, "x") if c is ref else style[pair]
            (line,) = ax.plot([w for w, _ in points], [v for _, v in points], color=color, marker=marker,
                              linewidth=1.2, markersize=5)
            drawn[pair] = line
        if not any(ax.get_lines()):
            ax.text(0.5, 0.5, "nothing above 0 to draw" if members else "not measured in this run",
                    transform=ax.transAxes, ha="center", color="#777777")
        ax.set_title(heading)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        # Plain numbers at 1, 2, 5, 10...: a reader compares them with the targets.
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    workers = sorted({r["workers"] for c in combos for r in c["contention"]})
    for ax in axes[1]:
        ax.set_xticks(workers)
        ax.set_xticklabels([str(w) for w in workers])
        ax.set_xlabel("waiters on one lock (over two processes)")
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel)
    fig.suptitle(title)
    pairs = [p for p in list(style) + [REFERENCE] if p in drawn]
    fig.legend([drawn[p] for p in pairs], pairs, loc="lower center", ncol=min(len(pairs), 5), fontsize=8,
               frameon=False, bbox_to_anchor=(0.5, 0.02))
    fig.tight_layout(rect=(0, 0.1, 1, 0.97))
    footer(fig, data["environment"])
    fig.savefig(path)
    plt.close(fig)


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join("compare-out", "compare.json")
    with open(src) as f:
        data = json.load(f)
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(src) or "."
    os.makedirs(out, exist_ok=True)
    style = pairs_of(data["combinations"])
    ping = data["environment"]["ping"]["p50_us"]
    written = [os.path.join(out, n) for n in ("uncontended.svg", "handoff.svg", "commands.svg")]
    plot_uncontended(data, style, written[0])
    plot_by_waiters(data, style, written[1],
                    lambda r: r["handoff"]["p50_us"] / ping if r["handoff"]["samples"] else None,
                    "hand-off p50, in PING round trips",
                    "Hand-off: a release's reply to the next holder's acquire reply (another worker)")
    plot_by_waiters(data, style, written[2], lambda r: r["commands_per_acquisition"],
                    "Redis commands per acquisition",
                    "Server work per acquisition under contention (besides the critical section's GET and SET)")
    for p in written:
        print(p)


if __name__ == "__main__":
    main()
