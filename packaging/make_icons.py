"""Render assets/icons/specscope.svg to the PNG sizes desktops want (run after editing the SVG)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtGui import QGuiApplication, QImage, QPainter  # noqa: E402
from PySide6.QtSvg import QSvgRenderer  # noqa: E402

SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICONS = Path(__file__).resolve().parent.parent / "assets" / "icons"


def main() -> int:
    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    renderer = QSvgRenderer(str(ICONS / "specscope.svg"))
    if not renderer.isValid():
        print("the SVG icon could not be read", file=sys.stderr)
        return 1
    for size in SIZES:
        image = QImage(size, size, QImage.Format.Format_ARGB32)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter)
        painter.end()
        image.save(str(ICONS / f"specscope-{size}.png"))
    del app
    return 0


if __name__ == "__main__":
    sys.exit(main())
