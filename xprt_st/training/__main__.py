"""``python -m xprt_st.training ...``: the older launcher name of ``python -m xprt_st`` (kept for scripts).

It runs the package's entry module by name rather than importing the CLI, so the training package
never imports the layer above it.
"""

from __future__ import annotations

import runpy

if __name__ == "__main__":
    runpy.run_module("xprt_st", run_name="__main__", alter_sys=True)
