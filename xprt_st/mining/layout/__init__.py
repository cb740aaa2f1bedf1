"""The mining output folder: the one package that names, writes and reads its files.

``folder`` names every file and holds the run manifest and the shard and chunk files; ``merged``
writes and publishes the merge's parts; ``lock`` keeps one writer per folder. See
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

__all__ = [
    *_folder_names,
    "FolderLock",
    "MergedParts",
    "concatenate_text",
    "part_name",
    "publish_dataset",
    "publish_passages",
    "write_arrow",
]
