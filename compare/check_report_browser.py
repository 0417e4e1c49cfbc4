#!/usr/bin/python3
"""The report page as a browser shows it: a quick dlock-compare run (the
fixed-lease spin locks, whose stories overlap and do not), its page
loaded in headless Chromium. The DOM Chromium builds must hold one figure
per fault story and per contention strip, one red region per overlap the
JSON records and no other, and every lane's name; the screenshot must not
be blank and must show the red of an overlap. Skips (exit 77) where
Chromium is not installed (.ci/run installs Debian's `chromium`).

usage: check_report_browser.py DLOCK_COMPARE OUT_DIR [--screenshot PATH]
  --screenshot PATH  also keep the screenshot there (docs/plots/ has one)
"""
import json
import os
import shutil
import subprocess
import sys


def fail(msg):
    print("check_report_browser: " + msg, file=sys.stderr)
    sys.exit(1)


def chromium():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


def browser(exe, page, *args):
    """Runs headless Chromium on `page`; its stdout."""
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           "--user-data-dir=" + os.path.join(os.path.dirname(page), "chromium-profile"), *args, "file://" + page]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        fail(f"chromium exited with {r.returncode}: {r.stderr[-500:]}")
    return r.stdout


def pixels(path):
    """The screenshot's pixels as (r, g, b) tuples (Pillow, which Debian's
    python3-matplotlib brings)."""
    try:
        from PIL import Image
    except ImportError:
        return None
    with Image.open(path) as im:
        return list(im.convert("RGB").getdata())


def main(argv):
    args = argv[1:]
    keep = None
    if "--screenshot" in args:
        at = args.index("--screenshot")
        keep = args[at + 1]
        del args[at:at + 2]
    if len(args) != 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    exe, out = args
    chrome = chromium()
    if not chrome:
        print("check_report_browser: skipped: no chromium (apt-get install chromium)")
        return 77
    out = os.path.abspath(out)
    shutil.rmtree(out, ignore_errors=True)  # a page left by an earlier run must not pass for this one's
    r = subprocess.run([exe, "--quick", "--filter", "*/fixed/spin", "--out", out], capture_output=True, text=True,
                       timeout=600)
    if r.returncode != 0:
        fail(f"dlock-compare exited with {r.returncode}: {r.stderr[-800:]}")
    with open(os.path.join(out, "compare.json")) as f:
        data = json.load(f)
    page = os.path.join(out, "report.html")
    if f"wrote {page}" not in r.stderr:
        fail(f"dlock-compare did not write {page}: {r.stderr[-500:]}")

    # The structure, as the browser parsed it.
    dom = browser(chrome, page, "--dump-dom")
    stories = [t for f in data["faults"] for t in f["timelines"]]
    strips = [c["strip"] for row in data["combinations"] for c in row["contention"] if c.get("strip")]
    overlaps = sum(len(t["overlaps"]) for t in stories + strips)
    figures = dom.count('<figure class="story"')
    red = dom.count('class="overlap"')
    if not stories or figures != len(stories) + len(strips):
        fail(f"{figures} figures in the page, for {len(stories)} stories and {len(strips)} strips")
    if not any(t["overlaps"] for t in stories) or red != overlaps:
        fail(f"{red} red regions in the page, {overlaps} overlaps in the JSON")
    for t in stories + strips:
        for lane in t["lanes"]:
            if f'class="lane-name"' not in dom or f">{lane['name']}</text>" not in dom:
                fail(f"lane {lane['name']!r} of {t['story']} has no label in the page")

    # The picture: the first screen has the first paused holder's overlap.
    shot = os.path.join(out, "report.png")
    browser(chrome, page, "--window-size=900,1500", "--screenshot=" + shot)
    if not os.path.exists(shot) or os.path.getsize(shot) < 20000:
        fail(f"the screenshot {shot} is missing or nearly empty")
    px = pixels(shot)
    if px is None:
        fail("Pillow is missing (Debian's python3-pil, which python3-matplotlib brings): the screenshot cannot be read")
    else:
        inked = sum(1 for p in px if min(p) < 200)
        colors = len(set(px[:: max(1, len(px) // 20000)]))
        reddish = sum(1 for r_, g, b in px if r_ > 225 and 170 <= g <= 215 and 170 <= b <= 215)
        if inked < len(px) // 100 or colors < 20:
            fail(f"the screenshot looks blank: {inked} dark pixels of {len(px)}, {colors} colors")
        if reddish < 200:
            fail(f"the screenshot shows no red overlap ({reddish} pixels of its colour)")
    if keep:
        os.makedirs(os.path.dirname(os.path.abspath(keep)), exist_ok=True)
        shutil.copyfile(shot, keep)
        print(f"check_report_browser: kept the screenshot as {keep}")
    print(f"check_report_browser: {figures} figures, {red} red regions, screenshot {shot}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
