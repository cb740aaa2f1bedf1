"""Engines: who runs the mining stages. ``local`` (one process, or one job per shard) and ``ray`` (a cluster).

Choose one through :func:`xprt_st.mining.mine.run_mining` (or ``xprt-st mine --engine``); nothing
outside this package and :mod:`xprt_st.mining.mine` imports an engine.
"""
