"""`xprt-st evaluate`: placeholder until its issue lands."""

from __future__ import annotations
