"""Opens a `dtc plan --html` page in headless Chromium (Debian's
chromium-headless-shell) and checks what the browser built from it: the
page's script ran to its end without a console error, the parameter table
has a row per parameter of `dtc plan --json`, a memory bar per rank the
summary lists, the timeline drew spans, the filter narrows the table; and a
screenshot is taken (a PNG of some size)."""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(__file__))
from browser import browse, screenshot  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("page")
ap.add_argument("summary", help="dtc plan --json of the same plan")
ap.add_argument("--screenshot", required=True)
args = ap.parse_args()

summary = json.load(open(args.summary))
dom = browse(args.page, "--dump-dom")
assert 'data-rendered="yes"' in dom, "the page's script did not finish"
body = re.search(r'<table id="parameters">.*?<tbody>(.*?)</tbody>', dom, re.S).group(1)
rows = body.count("<tr")
assert rows == len(summary["parameters"]), (rows, len(summary["parameters"]))
assert f'{len(summary["parameters"])} of {len(summary["parameters"])} shown' in dom
bars = len(re.findall(r'<div class="bar" data-rank="\d+"', dom))
assert bars == len(summary["memory"]), (bars, len(summary["memory"]))
spans = int(re.search(r'<canvas id="timeline"[^>]*data-spans="(\d+)"', dom).group(1))
assert spans > 0, "the timeline drew nothing"
decisions = re.search(r'<ul id="decisions">(.*?)</ul>', dom, re.S).group(1).count("<li")
assert decisions == len(summary["decisions"]), (decisions, len(summary["decisions"]))

png = screenshot(args.page, args.screenshot)
print(f"page: {rows} parameters, {bars} memory bars, {spans} timeline spans, "
      f"{decisions} decisions; screenshot {len(png)} bytes")
