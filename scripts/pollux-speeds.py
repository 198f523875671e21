#!/usr/bin/env python3
"""Writes a `gantry whatif --speedups` table for the six Pollux applications from Gavel's.

Gavel (OSDI'20) measured K80, P100 and V100; Pollux's jobs ran on T4. Each Pollux application
takes the rows of the Gavel job type closest to it (same model family, or the same kind of
work), and T4 takes P100's throughput: an assumption (T4: 8.1 FP32 TFLOPS, 320 GB/s; P100:
9.3 TFLOPS, 732 GB/s), stated in docs/capacity.md, not a measurement.

Usage: python3 scripts/pollux-speeds.py testdata/speedups/gavel.csv > pollux-speeds.csv
"""
import csv
import sys

CLOSEST = {
    "cifar10": "ResNet-18 (batch size 128)",  # ResNet-18 on CIFAR-10 in both
    "imagenet": "ResNet-50 (batch size 64)",  # ResNet-50 on ImageNet in both
    "bert": "Transformer (batch size 64)",  # a Transformer
    "deepspeech2": "LM (batch size 20)",  # a recurrent network
    "ncf": "Recommendation (batch size 2048)",  # collaborative filtering
    "yolov3": "ResNet-50 (batch size 32)",  # a convolutional backbone
}

rows = list(csv.DictReader(open(sys.argv[1])))
out = csv.writer(sys.stdout, lineterminator="\n")
out.writerow(["job_type", "gpu_model", "throughput"])
for app, gavel in CLOSEST.items():
    by_model = {r["gpu_model"]: r["throughput"] for r in rows if r["job_type"] == gavel}
    for model in ("K80", "P100", "V100"):
        out.writerow([app, model, by_model[model]])
    out.writerow([app, "T4", by_model["P100"]])
