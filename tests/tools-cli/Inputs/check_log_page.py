"""Opens a `dtc report LOG --html` page in headless Chromium: its script ran
to the end without console errors, each chart drew a point per step record
of the log, and a screenshot is taken."""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(__file__))
from browser import browse, screenshot  # noqa: E402

page, log, shot = sys.argv[1:4]
steps = len([line for line in open(log) if line.strip()])
dom = browse(page, "--dump-dom")
assert 'data-rendered="yes"' in dom, "the page's script did not finish"
for chart in ("loss", "rate"):
    m = re.search(rf'<canvas id="{chart}"[^>]*data-points="(\d+)"', dom)
    assert m and int(m.group(1)) == steps, (chart, m and m.group(1), steps)
last = json.loads(open(log).read().strip().splitlines()[-1])
assert f"{steps} steps logged; step {last['step']}: loss" in dom
png = screenshot(page, shot, "1000,800")
print(f"page: {steps} steps on each chart; screenshot {len(png)} bytes")
