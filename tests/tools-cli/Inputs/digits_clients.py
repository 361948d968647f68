#!/usr/bin/env python3
"""The digits data set (scikit-learn) split non-IID over federated clients.

digits_clients.py OUT [--clients 4] [--shards 2,2,2,2]: standardises the
1797 8x8 images (statistics of the first 1437), keeps the last 360 as a
held-out set (OUT/test_x.npy, OUT/test_y.npy), sorts the first 1437 by
label and cuts them into sum(shards) equal shards, and gives client c the
next shards[c] of them in a seeded random order, in OUT/data/c/{x,labels}.npy:
each client sees only a few digits, and clients with more shards have more
samples. Prints each client's sample count and label histogram.
"""
import argparse
import os

import numpy as np
from sklearn.datasets import load_digits


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--shards", default="2,2,2,2")
    args = parser.parse_args()
    shards = [int(s) for s in args.shards.split(",")]
    x, y = load_digits(return_X_y=True)
    x = x.astype(np.float32)
    x = (x - x[:1437].mean(0)) / (x[:1437].std(0) + 1e-6)
    train_x, train_y = x[:1437], y[:1437]
    pieces = np.array_split(np.argsort(train_y, kind="stable"), sum(shards))
    order = np.random.RandomState(0).permutation(len(pieces))
    at = 0
    for client, count in enumerate(shards):
        rows = np.concatenate([pieces[i] for i in order[at:at + count]])
        at += count
        folder = os.path.join(args.out, "data", str(client))
        os.makedirs(folder, exist_ok=True)
        np.save(os.path.join(folder, "x.npy"), train_x[rows])
        np.save(os.path.join(folder, "labels.npy"), train_y[rows].astype(np.int64))
        print(client, len(rows), np.bincount(train_y[rows], minlength=10).tolist())
    np.save(os.path.join(args.out, "test_x.npy"), x[1437:])
    np.save(os.path.join(args.out, "test_y.npy"), y[1437:])


if __name__ == "__main__":
    main()
