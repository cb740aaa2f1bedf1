"""`xprt-st mine`: placeholder until its issue lands."""

from __future__ import annotations
