"""Files shipped beside the code (assets/): found the same way from a checkout, an install and a PyInstaller
bundle, which unpacks them under `sys._MEIPASS`."""

from __future__ import annotations

import sys
from pathlib import Path

ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)


def assets_dirs() -> list[Path]:
    """Where assets/ may be, in the order they are tried: the bundle first, then beside the packages."""
    dirs = []
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        dirs.append(Path(bundle) / "assets")
    dirs.append(Path(__file__).resolve().parent.parent / "assets")
    dirs.append(Path(sys.prefix) / "share" / "specscope" / "assets")  # a regular pip install
    return dirs


def asset_path(name: str) -> Path:
    """The path of assets/NAME (e.g. "presets.json", "icons/specscope.svg"); the last candidate when none has
    it, so the caller's error names a real place."""
    candidates = [d / name for d in assets_dirs()]
    return next((path for path in candidates if path.exists()), candidates[-1])


def app_icon():
    """The application icon from the PNG sizes rendered from assets/icons/specscope.svg (PNGs need no SVG
    plugin); the SVG itself only when the PNGs are missing."""
    from PySide6.QtGui import QIcon

    icon = QIcon()
    for size in ICON_SIZES:
        png = asset_path(f"icons/specscope-{size}.png")
        if png.is_file():
            icon.addFile(str(png))
    if icon.isNull():
        svg = asset_path("icons/specscope.svg")
        if svg.is_file():
            icon.addFile(str(svg))
    return icon
