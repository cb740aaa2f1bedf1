"""Model folders that do not load, for the checks made before any work: one whose architecture needs its own code
(``trust_remote_code``), and one that looks whole but whose weights cannot be read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def custom_code_model(tiny_model_path: Path, folder: Path) -> Path:
    """A copy of the tiny BERT whose ``config.json`` names a model type transformers does not ship and the model's
    own code files (``auto_map``), as a model published with custom code does."""
    shutil.copytree(tiny_model_path, folder)
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "my-custom-bert"
    config["auto_map"] = {"AutoConfig": "configuration_custom.CustomConfig", "AutoModel": "modeling_custom.CustomModel"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "configuration_custom.py").write_text(
        "from transformers import BertConfig\n\n\nclass CustomConfig(BertConfig):\n    model_type = 'my-custom-bert'\n"
    )
    (folder / "modeling_custom.py").write_text(
        "from transformers import BertModel\n\n\nclass CustomModel(BertModel):\n    pass\n"
    )
    return folder


def unreadable_weights_model(tiny_model_path: Path, folder: Path) -> Path:
    """A copy of the tiny BERT whose weights file is garbage: nothing short of loading it tells."""
    shutil.copytree(tiny_model_path, folder)
    weights = next(folder.glob("*.safetensors"))
    weights.write_bytes(b"not a safetensors file" * 8)
    return folder
