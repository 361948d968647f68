"""Headless Chromium (Debian's chromium-headless-shell) for the tests of the
pages dtc writes: the DOM after the page's script ran, and screenshots; a
console error fails."""
import subprocess

BROWSER = ["chromium-headless-shell", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--virtual-time-budget=5000"]


def browse(page, *flags):
    """Opens file `page` with `flags`; its stdout (the DOM with --dump-dom)."""
    done = subprocess.run([*BROWSER, *flags, "file://" + page], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    errors = [line for line in console if "ERROR:CONSOLE" in line or "Uncaught" in line]
    assert not errors, "console errors:\n" + "\n".join(errors)
    return done.stdout


def screenshot(page, path, size="1300,1600"):
    """Takes a screenshot of `page` into `path`; its PNG bytes."""
    browse(page, "--window-size=" + size, "--screenshot=" + path)
    png = open(path, "rb").read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000, len(png)
    return png
