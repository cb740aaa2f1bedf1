"""Round 5: the license a user can find. pyproject.toml declares Apache-2.0; the repository root holds its full text,
and the wheel and the sdist built from the sources ship it (built offline, without build isolation)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_root_license_is_the_apache_2_text_pyproject_declares() -> None:
    assert 'license = { text = "Apache-2.0" }' in (ROOT / "pyproject.toml").read_text(encoding="utf-8").splitlines()
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.lstrip().startswith("Apache License\n                           Version 2.0, January 2004")
    assert "END OF TERMS AND CONDITIONS" in text and "9. Accepting Warranty or Additional Liability." in text
    assert len(text.splitlines()) == 201  # the full text with its appendix, not a notice


def test_the_wheel_and_the_sdist_ship_the_license(tmp_path: Path) -> None:
    """Builds both from a copy of the sources (setuptools writes build/ and *.egg-info beside them)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "xprt_st", source / "xprt_st", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "dist"
    for hook in ("build_wheel", "build_sdist"):  # PEP 517 hooks without isolation: nothing is downloaded
        build = f"from setuptools import build_meta; import sys; build_meta.{hook}(sys.argv[1])"
        done = subprocess.run([sys.executable, "-c", build, str(out)], cwd=source, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
    license_text = (ROOT / "LICENSE").read_bytes()
    (wheel,) = out.glob("xprt_st-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        shipped = [name for name in names if name.endswith(".dist-info/licenses/LICENSE")]
        assert len(shipped) == 1, names
        assert archive.read(shipped[0]) == license_text
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        assert "License-File: LICENSE" in metadata
    (sdist,) = out.glob("xprt_st-*.tar.gz")
    with tarfile.open(sdist) as archive:
        member = next(m for m in archive.getmembers() if m.name.count("/") == 1 and m.name.endswith("/LICENSE"))
        assert archive.extractfile(member).read() == license_text
