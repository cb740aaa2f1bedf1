"""Write a copy of a start model that is served with its ``[CLS]`` vector instead of its own pooling.

RetroMAE's published models are served with ``[CLS]``; a comparison scores every model, the start included,
with the model's own pooling, and ``RetroMAELoss(pooling="model")`` trains that vector. To compare RetroMAE in
its own setting (trained on ``[CLS]``, served with ``[CLS]``, the start also scored on ``[CLS]``), the start
itself must pool ``[CLS]``: this script writes such a copy, and ``benchmarks/compare-from-bert-cls.yaml``
runs the comparison from it. Every recipe of that comparison then trains and is scored on ``[CLS]``.

The copy keeps the source folder's weights file as it is (with a pre-trained MLM head, when it has one, so
:func:`xprt_st.models.attach_mlm_head` still finds it), its tokenizer and its ``pretraining.json``; only the
sentence-transformers modules (``modules.json``, ``1_Pooling``) are written anew.

Run:  python benchmarks/make_cls_start.py --model runs/small-bert --output runs/small-bert-cls
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from sentence_transformers.sentence_transformer.modules import Pooling

from xprt_st.models import load_model

# files of the source folder copied unchanged; the weights keep the MLM head that a plain save would drop
CARRIED = ("model.safetensors", "pretraining.json")


def make_cls_start(model: str, output: Path) -> Path:
    """Write ``model`` with a ``[CLS]`` pooling into ``output`` and return it; ``output`` must not exist."""
    if output.exists():
        raise SystemExit(f"{output} exists: give a new folder (this script never overwrites a model)")
    source = Path(model)
    encoder = load_model(model, device="cpu")
    pooling_index = next(i for i, module in enumerate(encoder) if isinstance(module, Pooling))
    encoder[pooling_index] = Pooling(encoder.get_embedding_dimension(), pooling_mode="cls")
    encoder.save(str(output))
    for name in CARRIED:
        if (source / name).is_file():
            shutil.copy2(source / name, output / name)
    (output / "cls_start.json").write_text(
        json.dumps({"source": str(source), "pooling": "cls"}, indent=2) + "\n", encoding="utf-8"
    )
    return output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the start model folder, e.g. runs/small-bert")
    parser.add_argument("--output", required=True, type=Path, help="a new folder for the [CLS]-served copy")
    args = parser.parse_args()
    print(make_cls_start(args.model, args.output))


if __name__ == "__main__":
    main()
