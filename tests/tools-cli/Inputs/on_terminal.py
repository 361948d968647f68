#!/usr/bin/env python3
"""Runs a command with its standard output on a pseudo-terminal of a given
width and prints what it wrote there, control characters escaped (\\r as
<CR>, ESC as <ESC>), so that FileCheck can read a terminal's progress line.

on_terminal.py COLUMNS COMMAND ARGS...
"""
import fcntl
import os
import struct
import subprocess
import sys
import termios


def main():
    columns, command = int(sys.argv[1]), sys.argv[2:]
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    process = subprocess.Popen(command, stdout=slave, stderr=subprocess.STDOUT)
    os.close(slave)
    data = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        data += chunk
    status = process.wait()
    text = data.decode("utf-8", "replace").replace("\r\n", "\n")
    sys.stdout.write(text.replace("\r", "<CR>").replace("\x1b", "<ESC>"))
    sys.exit(status)


if __name__ == "__main__":
    main()
