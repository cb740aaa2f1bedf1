"""``python -m xprt_st.training train ...``: the ``xprt-st`` command as a module, for launchers.

``torchrun -m`` and ``accelerate launch -m`` need a module to run; console-script paths differ between
environments (pyenv shims are shell scripts that torchrun cannot run). This is the command of
:mod:`xprt_st.cli.__main__`, under the name launchers are documented with.
"""

from __future__ import annotations

from xprt_st.cli.__main__ import main

if __name__ == "__main__":
    main()
