"""``python -m xprt_st ...``: the ``xprt-st`` command as a module, for launchers.

``torchrun -m xprt_st train ...`` and ``accelerate launch -m xprt_st train ...`` need a module to run;
console-script paths differ between environments (pyenv shims are shell scripts that torchrun cannot
run). The entry sits at the top of the package, above every stage, so no stage imports the CLI.
"""

from __future__ import annotations

from xprt_st.cli.__main__ import main

if __name__ == "__main__":
    main()
