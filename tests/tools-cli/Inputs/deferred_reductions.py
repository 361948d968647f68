"""Checks two `dtc simulate --trace` timelines of one pipelined plan: the
first with a communication stream, the second without
(--no-communication-stream). With a stream, the data-parallel reductions
listed to overlap the last backward (stream 3) start before the stage's
last transfer on a stage that sends its gradients back; without one, a
stage keeps them until its backward is done: on every rank, at least as
many all-reduces start after its last transfer."""
import json
import sys


def events(path):
    trace = json.load(open(path))
    return [e for e in trace["traceEvents"] if e.get("ph") == "X"]


stream, blocking = events(sys.argv[1]), events(sys.argv[2])
ranks = sorted({e["pid"] for e in stream})
assert len(ranks) >= 2, ranks
early = 0
for rank in ranks:
    def last_transfer(evs):
        return max(e["ts"] for e in evs if e["pid"] == rank and
                   e["name"].startswith(("send", "receive")))
    overlapped = [e for e in stream if e["pid"] == rank and e["tid"] == 3]
    assert overlapped, f"rank {rank}: no reduction overlaps the last backward"
    early += min(e["ts"] for e in overlapped) < last_transfer(stream)
    after = [e for e in blocking if e["pid"] == rank and e["name"].startswith("all_reduce")
             and e["ts"] > last_transfer(blocking)]
    assert len(after) >= len(overlapped), (rank, len(after), len(overlapped))
    assert all(e["tid"] == 0 for e in blocking if e["pid"] == rank), rank
assert early > 0, "with a stream, no stage starts a reduction before its last transfer"
