#!/usr/bin/env python3
"""Train a hospital's teachers with PyTorch and export them as ONNX teachers.

Each teacher is a small PyTorch classifier trained on its own disjoint shard
of the hospital's data, as PATE needs: one patient record touches one
teacher. Every teacher is exported to ONNX with the interface an NZC
federation expects: one float32 input "features" of shape [batch, features]
(the rows the student sends, images channel-last) and one float32 output
"logits" of shape [batch, classes], the batch axis dynamic. onnx.json beside
them names the models, the features and the classes, so that

    nzc-teacher run --config hospital.yaml --models OUT --onnxruntime lib/onnxruntime/libonnxruntime.so.1

(built with -tags onnx) votes with them. nzc onnx check checks one model
without running it.

The data is a CSV file as nzc-teacher reads it: the features, then the
integer class; a first line that is not all numbers is a header.

With --query and --votes, the script also writes each teacher's PyTorch
prediction for every row of the query CSV (labels ignored), so that the
ONNX teachers' votes can be compared with PyTorch's (examples/pytorch's
test does).
"""

import argparse
import csv
import json
import os
import sys

import torch
from torch import nn


def read_csv(path):
    rows, labels = [], []
    with open(path, newline="") as f:
        for i, rec in enumerate(csv.reader(f)):
            if not rec or rec[0].startswith("#"):
                continue
            try:
                values = [float(v) for v in rec]
            except ValueError:
                if i == 0:
                    continue  # header
                sys.exit(f"{path}: line {i + 1} is not numbers: {rec}")
            rows.append(values[:-1])
            labels.append(int(values[-1]))
    if not rows:
        sys.exit(f"{path}: no records")
    return torch.tensor(rows, dtype=torch.float32), torch.tensor(labels, dtype=torch.long)


def teacher_model(features, classes, hidden):
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="training CSV: features, then the class")
    p.add_argument("--teachers", type=int, default=5, help="teachers, each on its own disjoint shard")
    p.add_argument("--classes", type=int, default=0, help="classes of the federation (default: largest label + 1)")
    p.add_argument("--hidden", type=int, default=32, help="width of the hidden layer")
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", required=True, help="directory for teacher-N.onnx and onnx.json (created)")
    p.add_argument("--query", help="CSV of rows to predict with PyTorch (labels ignored)")
    p.add_argument("--votes", help="where to write the PyTorch predictions of --query, as JSON")
    a = p.parse_args()

    torch.manual_seed(a.seed)
    x, y = read_csv(a.data)
    features = x.shape[1]
    classes = a.classes or int(y.max()) + 1
    if classes < 2 or int(y.max()) >= classes:
        sys.exit(f"labels run to {int(y.max())}: --classes {classes} is too few")
    if a.teachers < 1 or a.teachers > len(y):
        sys.exit(f"--teachers {a.teachers}: want 1 to {len(y)} (one shard each)")
    os.makedirs(a.out, exist_ok=True)
    if os.path.exists(os.path.join(a.out, "onnx.json")):
        sys.exit(f"{a.out} already holds onnx.json: export into a new directory")

    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(a.seed))
    shards = [perm[i * len(y) // a.teachers:(i + 1) * len(y) // a.teachers] for i in range(a.teachers)]
    query = read_csv(a.query)[0] if a.query else None
    names, votes = [], []
    for t, shard in enumerate(shards):
        model = teacher_model(features, classes, a.hidden)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        for _ in range(a.epochs):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x[shard]), y[shard])
            loss.backward()
            opt.step()
        model.eval()
        name = f"teacher-{t:04d}.onnx"
        torch.onnx.export(
            model, torch.zeros(1, features), os.path.join(a.out, name),
            input_names=["features"], output_names=["logits"],
            dynamic_axes={"features": {0: "batch"}, "logits": {0: "batch"}},
            opset_version=13,
        )
        names.append(name)
        if query is not None:
            with torch.no_grad():
                votes.append(model(query).argmax(dim=1).tolist())
        acc = (model(x[shard]).argmax(dim=1) == y[shard]).float().mean().item()
        print(f"{name}: {len(shard)} examples, training accuracy {acc:.3f}", file=sys.stderr)

    # The manifest last: a directory without one holds no complete ensemble.
    with open(os.path.join(a.out, "onnx.json"), "w") as f:
        json.dump({"features": features, "classes": classes, "models": names}, f, indent=2)
    if a.votes:
        with open(a.votes, "w") as f:
            json.dump(votes, f)
    print(f"wrote {len(names)} ONNX teachers ({features} features, {classes} classes) and onnx.json to {a.out}")


if __name__ == "__main__":
    main()
