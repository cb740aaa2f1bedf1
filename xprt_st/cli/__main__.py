"""``python -m xprt_st.cli``: the ``xprt-st`` command without the installed script (e.g. from a checkout).

Launchers that need a module (``torchrun -m``, ``accelerate launch -m``) may also run
``python -m xprt_st``, which calls the same :func:`main`.
"""

from __future__ import annotations


def main() -> None:
    """Run the ``xprt-st`` command line with ``sys.argv``."""
    from xprt_st.cli import app

    app(prog_name="xprt-st")


if __name__ == "__main__":
    main()
