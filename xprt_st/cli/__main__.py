"""``python -m xprt_st.cli``: the ``xprt-st`` command without the installed script (e.g. from a checkout)."""

from xprt_st.cli import app

app(prog_name="xprt-st")
