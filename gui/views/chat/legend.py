"""The transcript's legend: what each colour means, in the very formats the transcript draws with, the "Colour by"
choice (gui.views.chat.colouring) and the toggle that hides rejected drafts. By status it names every status;
by a figure it shows the scale as a gradient with its end labels and a "no value" chip.

May touch: QtWidgets/QtGui, gui.theme, gui.views.chat.colouring (the modes, their scales and formats).
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QLinearGradient, QPainter, QPen, QTextCharFormat, QTextCursor, QTextDocument
from PySide6.QtWidgets import (QCheckBox, QComboBox, QHBoxLayout, QLabel, QSizePolicy, QStyle, QStyleOptionComboBox,
                               QStylePainter, QWidget)

from engine.core.events import TokenStatus
from gui import theme
from gui.views.chat import colouring

NO_VALUE_TIP = "No value in this colouring (the target's own token, a drafter with no distribution, or a round " \
               "whose tree was not recorded): no box"


class TextChip(QWidget):
    """A word drawn in a transcript format, so the legend cannot drift from what it names."""

    def __init__(self, label: str, tooltip: str, palette: theme.Palette, parent=None) -> None:
        super().__init__(parent)
        self.label = label
        self._doc = QTextDocument(self)
        self._doc.setDocumentMargin(2)
        self.setToolTip(tooltip)
        self.set_palette(palette)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)

    def chip_format(self, palette: theme.Palette) -> QTextCharFormat:
        return colouring.no_value_format(palette)

    def set_palette(self, palette: theme.Palette) -> None:
        self._doc.clear()
        self._doc.setDefaultFont(self.font())
        QTextCursor(self._doc).insertText(" " + self.label + " ", self.chip_format(palette))
        self.updateGeometry()
        self.update()

    def sizeHint(self) -> QSize:  # noqa: N802
        size = self._doc.size()
        return QSize(int(size.width()) + 2, int(size.height()) + 2)

    def paintEvent(self, event) -> None:  # noqa: N802
        painter = QPainter(self)
        painter.translate(1, 1)
        self._doc.drawContents(painter, QRectF(0, 0, self.width(), self.height()))
        painter.end()


class LegendChip(TextChip):
    """A status name drawn with the status's token format."""

    def __init__(self, status: TokenStatus, palette: theme.Palette, parent=None) -> None:
        self.status = status
        super().__init__(theme.STATUS_LABELS[status], theme.STATUS_DESCRIPTIONS[status], palette, parent)

    def chip_format(self, palette: theme.Palette) -> QTextCharFormat:
        return theme.token_format(palette, self.status)


class GradientStrip(QWidget):
    """A scale's stops as a horizontal gradient, low on the left."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.stops: tuple[str, ...] = ()
        self.border = "#000000"
        self.setFixedSize(120, 14)

    def set_scale(self, stops: tuple[str, ...], border: str) -> None:
        self.stops, self.border = stops, border
        self.update()

    def paintEvent(self, event) -> None:  # noqa: N802
        if not self.stops:
            return
        painter = QPainter(self)
        rect = QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5)
        gradient = QLinearGradient(rect.topLeft(), rect.topRight())
        for i, stop in enumerate(self.stops):
            gradient.setColorAt(i / max(1, len(self.stops) - 1), QColor(stop))
        painter.setPen(QPen(QColor(self.border)))
        painter.setBrush(gradient)
        painter.drawRoundedRect(rect, 3, 3)
        painter.end()


class ScaleLegend(QWidget):
    """A scale mode's legend: low label, gradient, high label, and the "no value" chip."""

    def __init__(self, palette: theme.Palette, parent=None) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        self.low, self.high = QLabel(), QLabel()
        self.strip = GradientStrip()
        self.no_value = TextChip("no value", NO_VALUE_TIP, palette)
        for widget in (self.low, self.strip, self.high):
            layout.addWidget(widget)
        layout.addSpacing(8)
        layout.addWidget(self.no_value)
        self._palette, self._mode = palette, colouring.mode("acceptance")

    def show_mode(self, mode: colouring.ColourMode) -> None:
        self._mode = mode
        self.low.setText(mode.low_label)
        self.high.setText(mode.high_label)
        self.strip.setToolTip(mode.description)
        self.set_palette(self._palette)

    def set_palette(self, palette: theme.Palette) -> None:
        self._palette = palette
        self.strip.set_scale(self._mode.stops(palette), palette.border)
        self.no_value.set_palette(palette)


class ColourByBox(QComboBox):
    """The "Colour by" choice: the list names each mode in full, the closed box by its short label (so the
    legend's row, and so the window, stays narrow)."""

    def short_label(self) -> str:
        return colouring.mode(self.currentData()).short_label if self.currentData() else ""

    def _size(self, labels) -> QSize:
        opt = QStyleOptionComboBox()
        self.initStyleOption(opt)
        width = max(self.fontMetrics().horizontalAdvance(label) for label in labels)
        return self.style().sizeFromContents(QStyle.ContentsType.CT_ComboBox, opt,
                                             QSize(width + 4, self.fontMetrics().height()), self)

    def sizeHint(self) -> QSize:  # noqa: N802
        return self._size([m.short_label for m in colouring.MODES.values()])

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return self.sizeHint()

    def showPopup(self) -> None:  # noqa: N802
        self.view().setMinimumWidth(self._size([m.label for m in colouring.MODES.values()]).width())
        super().showPopup()

    def paintEvent(self, event) -> None:  # noqa: N802
        painter = QStylePainter(self)
        opt = QStyleOptionComboBox()
        self.initStyleOption(opt)
        opt.currentText = self.short_label()
        painter.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, opt)
        painter.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, opt)


class LegendBar(QWidget):
    """Names every colour the transcript draws, with the toggle that hides rejected drafts and, with
    `colour_by`, the choice of what the colours show (it emits `colouring_changed(mode name)`)."""

    show_rejected_toggled = Signal(bool)
    colouring_changed = Signal(str)  # a gui.views.chat.colouring mode name

    def __init__(self, palette: theme.Palette, parent=None, colour_by: bool = False) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(2, 0, 2, 0)
        layout.setSpacing(4)  # the chips carry their own padding; the window's minimum width counts every pixel
        self.colour_by = None
        if colour_by:  # the choice is the caption: "Status: accepted, substituted…", "Target entropy: 0 … 8+ bits"
            layout.addWidget(self._build_colour_by())
        else:
            caption = QLabel("Tokens:")
            caption.setObjectName("dim")
            layout.addWidget(caption)
        self.chips = {status: LegendChip(status, palette) for status in theme.LEGEND_ORDER}
        for chip in self.chips.values():
            layout.addWidget(chip)
        self.scale_legend = ScaleLegend(palette)
        self.scale_legend.hide()
        layout.addWidget(self.scale_legend)
        layout.addStretch(1)
        self.show_rejected = QCheckBox("Show rejected")
        self.show_rejected.setChecked(True)
        self.show_rejected.setToolTip("Draw drafted tokens the target threw away, where they were proposed")
        self.show_rejected.toggled.connect(self.show_rejected_toggled)
        layout.addWidget(self.show_rejected)

    def _build_colour_by(self) -> ColourByBox:
        self.colour_by = ColourByBox()
        self.colour_by.setObjectName("colour_by")
        self.colour_by.setAccessibleName("Colour by")
        for i, chosen in enumerate(colouring.MODES.values()):
            self.colour_by.addItem(chosen.label, chosen.name)
            self.colour_by.setItemData(i, f"Colour by {chosen.label.lower()}: {chosen.description}",
                                       Qt.ItemDataRole.ToolTipRole)
        self.colour_by.setToolTip(self._combo_tip(colouring.mode(colouring.STATUS)))
        self.colour_by.currentIndexChanged.connect(self._colouring_picked)
        return self.colour_by

    @staticmethod
    def _combo_tip(chosen: colouring.ColourMode) -> str:
        return f"Colour by: what the tokens' colours show. Now {chosen.label.lower()}: {chosen.description}"

    @property
    def colouring(self) -> str:
        return self.colour_by.currentData() if self.colour_by is not None else colouring.STATUS

    def set_colouring(self, name: str) -> None:
        """Pick mode `name` (as the user would: it emits colouring_changed when it changes)."""
        colouring.mode(name)
        if self.colour_by is not None:
            self.colour_by.setCurrentIndex(self.colour_by.findData(name))

    def _colouring_picked(self, _index: int) -> None:
        chosen = colouring.mode(self.colouring)
        for chip in self.chips.values():
            chip.setVisible(not chosen.is_scale)
        self.scale_legend.setVisible(chosen.is_scale)
        if chosen.is_scale:
            self.scale_legend.show_mode(chosen)
        self.colour_by.setToolTip(self._combo_tip(chosen))
        self.colouring_changed.emit(chosen.name)

    def set_palette(self, palette: theme.Palette) -> None:
        for chip in self.chips.values():
            chip.set_palette(palette)
        self.scale_legend.set_palette(palette)
