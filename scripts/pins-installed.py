#!/usr/bin/env python3
"""Exits 0 when this interpreter has every NAME==VERSION given on the command line installed at
exactly that version, 1 otherwise. The setup scripts run it with a venv's python to decide whether
to pip install their pins."""
import sys
from importlib.metadata import PackageNotFoundError, version

for spec in sys.argv[1:]:
    name, want = spec.split("==")
    try:
        if version(name) != want:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
