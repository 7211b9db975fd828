#!/usr/bin/env python3
"""Reads a run folder with TensorBoard's own reader and checks it against the runs' metrics files.

usage: check_tensorboard.py RUN_FOLDER [--expect KIND,KIND,...]

Every log folder under RUN_FOLDER (a folder whose metrics.jsonl starts with a run header line)
is a run; TensorBoard's EventMultiplexer loads RUN_FOLDER as `tensorboard --logdir RUN_FOLDER`
would, and for each run the scalars it shows must be exactly those of the run's metrics.jsonl:
the same tags, the same steps in the same order (each step once), the values equal as float32.
Rows that name an `events_folder` (evaluate-adapter: one run per model) are checked against that
subfolder's run. The table of which row fields become which tags is docs/run-logs.md's, written
here independently of the Swift code (Sources/RunLog/Scalars.swift) so that the two check each
other. --expect lists log kinds that must be there (adapter, draft, evaluation).
Prints one line per run and exits 0 when everything agrees; prints every difference and exits 1.
"""
import argparse
import json
import os
import sys

import numpy as np
from tensorboard.backend.event_processing import event_accumulator, event_multiplexer

# Preference training's measurements (TRL's names; docs/run-logs.md), in train and eval rows.
PREFERENCE = ["rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies", "logps/chosen",
              "logps/rejected", "nll_loss", "log_odds_ratio", "log_odds_chosen"]
FIELDS = {
    "train": ("train/", ["loss", "smoothed_loss", "learning_rate", "grad_norm", "tokens_per_second"] + PREFERENCE),
    "eval": ("eval/", ["loss", "perplexity"] + PREFERENCE),
    "draft_eval": ("draft/", ["kl_reverse", "kl_forward", "tvd", "acceptance_rate", "greedy_agreement",
                              "teacher_mass_outside_head", "cost_ratio", "best_gamma", "best_speedup",
                              "best_gamma_greedy", "best_speedup_greedy"]),
    "evaluation": ("evaluate/", ["eval_loss", "perplexity", "exact_match_rate", "json_valid_rate",
                                 "schema_conformance_rate", "json_equal_rate", "tool_name_accuracy",
                                 "tool_argument_accuracy", "incomplete_replies", "tokens_per_second",
                                 "preference_accuracy", "preference_margin", "reward_accuracy"]),
}
GAMMA_TABLES = [("expected", "speedup", "draft/expected_speedup/gamma_"),
                ("expected", "tokens_per_target_call", "draft/tokens_per_target_call/gamma_"),
                ("expected_greedy", "speedup", "draft/greedy_speedup/gamma_")]


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)


def expected_scalars(row):
    """(tag, value) pairs a metrics row becomes."""
    spec = FIELDS.get(row.get("type"))
    if spec is None:
        return []
    prefix, names = spec
    out = [(prefix + n, row[n]) for n in names if is_number(row.get(n))]
    if row.get("type") == "draft_eval":
        for lst, field, stem in GAMMA_TABLES:
            for entry in row.get(lst) or []:
                if is_number(entry.get("gamma")) and is_number(entry.get(field)):
                    out.append((stem + str(int(entry["gamma"])), entry[field]))
    return out


def log_folders(root):
    """Folders under root whose metrics.jsonl starts with a run header: {relative path: rows}."""
    found = {}
    for dirpath, _, files in os.walk(root):
        if "metrics.jsonl" not in files:
            continue
        path = os.path.join(dirpath, "metrics.jsonl")
        with open(path, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        rel = os.path.relpath(dirpath, root)
        if not rows or rows[0].get("type") != "run":
            print(f"note: {path} has no run header (a log from before run logs); not a run, not checked")
            continue
        found[rel] = rows
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("--expect", default="", help="comma-separated log kinds that must be present")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    problems = []

    logs = log_folders(root)
    kinds = {rows[0].get("kind") for rows in logs.values()}
    for kind in filter(None, args.expect.split(",")):
        if kind not in kinds:
            problems.append(f"no {kind} run in {root} (found: {sorted(kinds)})")

    # every scalar, as `tensorboard --logdir root` loads it (all of them: no sampling)
    mux = event_multiplexer.EventMultiplexer(size_guidance={event_accumulator.SCALARS: 0})
    mux.AddRunsFromDirectory(root)
    mux.Reload()
    tb_runs = mux.Runs()

    expected = {}  # TensorBoard run name -> tag -> [(step, value)]
    for rel, rows in logs.items():
        for row in rows[1:]:
            scalars = expected_scalars(row)
            if not scalars:
                continue
            run = rel if not row.get("events_folder") else os.path.join(rel, row["events_folder"])
            for tag, value in scalars:
                expected.setdefault(run, {}).setdefault(tag, []).append((row["step"], value))

    for run in sorted(set(expected) | {r for r in tb_runs if tb_runs[r].get("scalars")}):
        want = expected.get(run, {})
        have_tags = set(tb_runs.get(run, {}).get("scalars", []))
        if run not in tb_runs:
            problems.append(f"{run}: metrics.jsonl has {len(want)} tags, but TensorBoard finds no run there")
            continue
        for tag in sorted(have_tags - set(want)):
            problems.append(f"{run}: TensorBoard has tag {tag}, metrics.jsonl has no such values")
        for tag in sorted(set(want) - have_tags):
            problems.append(f"{run}: metrics.jsonl has {tag} ({len(want[tag])} values), TensorBoard has none")
        for tag in sorted(set(want) & have_tags):
            events = mux.Scalars(run, tag)
            got = [(e.step, float(e.value)) for e in events]
            exp = [(s, float(np.float32(v))) for s, v in want[tag]]
            if [s for s, _ in got] != [s for s, _ in exp]:
                problems.append(f"{run} {tag}: steps {[s for s, _ in got][:12]}... in TensorBoard, {[s for s, _ in exp][:12]}... in metrics.jsonl")
                continue
            for (step, g), (_, e) in zip(got, exp):
                if g != e:
                    problems.append(f"{run} {tag} step {step}: TensorBoard {g!r}, metrics.jsonl {e!r} (as float32)")
            steps = [s for s, _ in got]
            if steps != sorted(set(steps)):
                problems.append(f"{run} {tag}: a step repeats or goes back: {steps}")
        n = sum(len(v) for v in want.values())
        print(f"{run}: {len(want)} tags, {n} scalars, equal to metrics.jsonl" if not any(p.startswith(run + " ") or p.startswith(run + ":") for p in problems) else f"{run}: DIFFERS")

    if problems:
        print("\n".join(problems))
        print(f"check_tensorboard: {len(problems)} differences between TensorBoard's reading of {root} and its metrics files")
        sys.exit(1)
    print(f"check_tensorboard: {len(expected)} TensorBoard runs in {root} equal their metrics files")


if __name__ == "__main__":
    main()
