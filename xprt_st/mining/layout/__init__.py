"""The mining output folder: the one package that names, writes and reads its files.

``folder`` names every file and holds the run manifest and the shard and chunk files; ``split`` a
split stage's files; ``merged``
writes and publishes the merge's parts; ``lock`` keeps one writer per folder; ``stats_file`` reads ``stats.json``. See
:mod:`xprt_st.mining.layout.folder` for the layout of the folder.
"""

from __future__ import annotations

from xprt_st.mining.layout.folder import *  # noqa: F403
from xprt_st.mining.layout.folder import __all__ as _folder_names
from xprt_st.mining.layout.lock import FolderLock
from xprt_st.mining.layout.merged import (
    MergedParts,
    concatenate_text,
    part_name,
    publish_dataset,
    publish_passages,
    write_arrow,
)
from xprt_st.mining.layout.split import SplitFolder, SplitWriter, documents_of, read_split_rows, split_table
from xprt_st.mining.layout.stats_file import STATS_OBJECTS, read_stats, stats_shape_problem

__all__ = [
    *_folder_names,
    "FolderLock",
    "SplitFolder",
    "SplitWriter",
    "documents_of",
    "read_split_rows",
    "read_stats",
    "stats_shape_problem",
    "STATS_OBJECTS",
    "split_table",
    "MergedParts",
    "concatenate_text",
    "part_name",
    "publish_dataset",
    "publish_passages",
    "write_arrow",
]
