"""The palette and style, in one place.

Every colour the GUI draws comes from a `Palette`: token statuses in the transcript and the legend, the
series in the live graphs, the stats tiles. There is one palette for light and one for dark, both built on
the Okabe–Ito colour-blind safe hues, and colour is never the only cue: substituted tokens are underlined,
bonus tokens dot-underlined, rejected drafts dim and struck through, accepted tokens sit on a tinted box.

May touch: QtGui (colours, fonts, text formats, the application palette) and engine.core.events.TokenStatus.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QColor, QFont, QGuiApplication, QPalette, QTextCharFormat, QTextFormat
from PySide6.QtCore import Qt

from engine.core.events import TokenStatus

# QTextCharFormat property that carries a token's serial number (its index in SessionModel.tokens), so that
# the transcript can find the token under the mouse without storing anything in the view.
TOKEN_SERIAL_PROPERTY = QTextFormat.Property.UserProperty + 1

STATUS_LABELS = {
    TokenStatus.ACCEPTED: "accepted",
    TokenStatus.SUBSTITUTED: "substituted",
    TokenStatus.BONUS: "bonus",
    TokenStatus.PLAIN: "plain",
    TokenStatus.REJECTED: "rejected draft",
}

STATUS_DESCRIPTIONS = {
    TokenStatus.ACCEPTED: "drafted and kept: the drafter guessed what the target would have written",
    TokenStatus.SUBSTITUTED: "the target's correction at the first drafted token it disagreed with (underlined)",
    TokenStatus.BONUS: "the target's extra token after it kept the whole draft (dotted underline)",
    TokenStatus.PLAIN: "decoded by the target alone (no draft this round)",
    TokenStatus.REJECTED: "drafted but thrown away, shown where it was proposed (dim, struck through)",
}

# Order of the legend and of anything else that lists statuses.
LEGEND_ORDER = (TokenStatus.ACCEPTED, TokenStatus.SUBSTITUTED, TokenStatus.BONUS, TokenStatus.PLAIN,
                TokenStatus.REJECTED)


@dataclass(frozen=True, slots=True)
class StatusStyle:
    background: str | None  # token box; None: no box
    background_alt: str | None  # every other token of the same status, so token boundaries show
    foreground: str | None  # None: the text colour
    underline: Qt.PenStyle | None  # None, or the underline's pen style
    underline_color: str | None
    strike: bool = False


@dataclass(frozen=True, slots=True)
class Palette:
    name: str
    dark: bool
    window: str
    surface: str  # transcript and plots
    surface_alt: str  # user bubbles, tiles
    border: str
    text: str
    text_dim: str
    accent: str  # primary button, focus
    accent_text: str
    error: str
    warning: str
    statuses: dict  # TokenStatus -> StatusStyle
    # graph series
    series_cumulative: str
    series_rolling: str
    series_speed: str
    series_speed_rolling: str
    series_baseline: str
    series_bars: str
    series_histogram: str
    series_draft_time: str
    series_verify_time: str
    series_network_time: str = "#cc79a7"  # a target on a server: the network's share of a round
    # colour-by scales (gui.views.chat.colouring), low → high, light enough (dark: dark enough) for `text` on them
    scale_probability: tuple[str, ...] = ()  # yellow → bluish green: acceptance probability, draft confidence
    scale_entropy: tuple[str, ...] = ()  # pale blue → lilac: the target's entropy

    def status(self, status: TokenStatus) -> StatusStyle:
        return self.statuses[status]


# Okabe–Ito hues: bluish green #009E73 (accepted), vermillion #D55E00 (substituted), blue #0072B2 (bonus).
LIGHT = Palette(
    name="light", dark=False,
    window="#f4f5f7", surface="#ffffff", surface_alt="#eef1f5", border="#d5d9e0",
    text="#1c1f24", text_dim="#6b7280", accent="#0b63c5", accent_text="#ffffff",
    error="#b42318", warning="#b54708",
    statuses={
        TokenStatus.ACCEPTED: StatusStyle("#bfe9d9", "#a8dfca", None, None, None),
        TokenStatus.SUBSTITUTED: StatusStyle("#ffd2b0", "#ffc598", None, Qt.PenStyle.SolidLine, "#c2410c"),
        TokenStatus.BONUS: StatusStyle("#c4dcf5", "#b0cff0", None, Qt.PenStyle.DotLine, "#0a58a6"),
        TokenStatus.PLAIN: StatusStyle(None, None, None, None, None),
        TokenStatus.REJECTED: StatusStyle(None, None, "#9aa1ab", None, None, strike=True),
    },
    series_cumulative="#009e73", series_rolling="#7cc9ae", series_speed="#0072b2", series_speed_rolling="#8fbfe0",
    series_baseline="#6b7280", series_bars="#009e73", series_histogram="#0072b2",
    series_draft_time="#e69f00", series_verify_time="#0072b2", series_network_time="#cc79a7",
    scale_probability=("#fbefb0", "#cfe7a4", "#93d4b8"), scale_entropy=("#cfe3f8", "#bcc8f1", "#cfabea"),
)

DARK = Palette(
    name="dark", dark=True,
    window="#1b1d22", surface="#22252b", surface_alt="#2c3038", border="#3a3f48",
    text="#e6e8eb", text_dim="#9aa1ab", accent="#4c9aff", accent_text="#0b1220",
    error="#ff8a80", warning="#fdb022",
    statuses={
        TokenStatus.ACCEPTED: StatusStyle("#1d5441", "#236249", None, None, None),
        TokenStatus.SUBSTITUTED: StatusStyle("#6b3412", "#7a3d16", None, Qt.PenStyle.SolidLine, "#ff9b5c"),
        TokenStatus.BONUS: StatusStyle("#1f3f66", "#264a75", None, Qt.PenStyle.DotLine, "#8cc4ff"),
        TokenStatus.PLAIN: StatusStyle(None, None, None, None, None),
        TokenStatus.REJECTED: StatusStyle(None, None, "#6f7782", None, None, strike=True),
    },
    series_cumulative="#3ccf9e", series_rolling="#1f7a5c", series_speed="#56b4e9", series_speed_rolling="#2f5f80",
    series_baseline="#9aa1ab", series_bars="#3ccf9e", series_histogram="#56b4e9",
    series_draft_time="#e6a23c", series_verify_time="#56b4e9", series_network_time="#d99cc0",
    scale_probability=("#4a4216", "#37561f", "#1c6550"), scale_entropy=("#1c3852", "#34407a", "#58337a"),
)

THEMES = {"light": LIGHT, "dark": DARK}


def system_prefers_dark() -> bool:
    app = QGuiApplication.instance()
    if app is None:
        return False
    scheme = QGuiApplication.styleHints().colorScheme()
    if scheme == Qt.ColorScheme.Dark:
        return True
    if scheme == Qt.ColorScheme.Light:
        return False
    return QGuiApplication.palette().color(QPalette.ColorRole.Window).lightness() < 128


def resolve(name: str = "auto") -> Palette:
    """`light`, `dark` or `auto` (follow the system)."""
    if name == "auto":
        return DARK if system_prefers_dark() else LIGHT
    try:
        return THEMES[name]
    except KeyError:
        raise ValueError(f"unknown theme {name!r}; choose auto, light or dark") from None


def token_format(palette: Palette, status: TokenStatus, alternate: bool = False,
                 serial: int | None = None) -> QTextCharFormat:
    """The character format of one token of `status` (the transcript and the legend both use this)."""
    style = palette.status(status)
    fmt = QTextCharFormat()
    background = style.background_alt if alternate and style.background_alt else style.background
    if background:
        fmt.setBackground(QColor(background))
    fmt.setForeground(QColor(style.foreground or palette.text))
    if style.underline is not None:
        fmt.setUnderlineStyle(_UNDERLINES[style.underline])
        fmt.setUnderlineColor(QColor(style.underline_color or palette.text))
    if style.strike:
        fmt.setFontStrikeOut(True)
    if serial is not None:
        fmt.setProperty(TOKEN_SERIAL_PROPERTY, serial)
    return fmt


_UNDERLINES = {
    Qt.PenStyle.SolidLine: QTextCharFormat.UnderlineStyle.SingleUnderline,
    Qt.PenStyle.DotLine: QTextCharFormat.UnderlineStyle.DotLine,
    Qt.PenStyle.DashLine: QTextCharFormat.UnderlineStyle.DashUnderline,
}


def text_format(palette: Palette, *, dim: bool = False, bold: bool = False, small: bool = False,
                color: str | None = None) -> QTextCharFormat:
    fmt = QTextCharFormat()
    fmt.setForeground(QColor(color or (palette.text_dim if dim else palette.text)))
    if bold:
        fmt.setFontWeight(QFont.Weight.DemiBold)
    if small:
        fmt.setFontPointSize(max(7.0, QGuiApplication.font().pointSizeF() * 0.88))
    return fmt


def qpalette(palette: Palette) -> QPalette:
    """A QPalette for the Fusion style that matches `palette`."""
    qp = QPalette()
    role = QPalette.ColorRole
    colours = {
        role.Window: palette.window, role.WindowText: palette.text, role.Base: palette.surface,
        role.AlternateBase: palette.surface_alt, role.Text: palette.text, role.Button: palette.surface_alt,
        role.ButtonText: palette.text, role.Highlight: palette.accent, role.HighlightedText: palette.accent_text,
        role.ToolTipBase: palette.surface_alt, role.ToolTipText: palette.text, role.PlaceholderText: palette.text_dim,
        role.Link: palette.accent, role.Mid: palette.border, role.Midlight: palette.border,
        role.Dark: palette.border, role.Light: palette.surface, role.Shadow: "#000000",
        role.BrightText: palette.error,
    }
    for r, value in colours.items():
        qp.setColor(r, QColor(value))
    disabled = QColor(palette.text_dim)
    for r in (role.WindowText, role.Text, role.ButtonText):
        qp.setColor(QPalette.ColorGroup.Disabled, r, disabled)
    return qp


def stylesheet(palette: Palette) -> str:
    """A light touch on top of Fusion: rounded inputs, a primary button, tiles."""
    p = palette
    return f"""
QMainWindow, QDockWidget {{ background: {p.window}; }}
QDockWidget::title {{ padding: 6px 8px; font-weight: 600; color: {p.text_dim}; }}
QTextEdit#transcript {{ background: {p.surface}; border: 1px solid {p.border}; border-radius: 8px; }}
QPlainTextEdit#message_box {{ background: {p.surface}; border: 1px solid {p.border}; border-radius: 8px;
    padding: 4px; }}
QPlainTextEdit#message_box:focus {{ border: 1px solid {p.accent}; }}
QPushButton {{ padding: 5px 14px; border-radius: 6px; border: 1px solid {p.border};
    background: {p.surface_alt}; color: {p.text}; }}
QPushButton:hover {{ border-color: {p.accent}; }}
QPushButton:disabled {{ color: {p.text_dim}; }}
QPushButton#send_button {{ background: {p.accent}; color: {p.accent_text}; border-color: {p.accent};
    font-weight: 600; }}
QPushButton#send_button:disabled {{ background: {p.surface_alt}; color: {p.text_dim}; border-color: {p.border}; }}
QFrame#stat_tile {{ background: {p.surface}; border: 1px solid {p.border}; border-radius: 8px; }}
QLabel#stat_caption {{ color: {p.text_dim}; }}
QLabel#stat_value {{ font-weight: 600; }}
QPushButton#stat_offer {{ padding: 0; border: none; background: transparent; color: {p.accent}; text-align: left;
    text-decoration: underline; }}
QPushButton#stat_offer:disabled {{ color: {p.text_dim}; }}
QLabel#problem {{ color: {p.error}; }}
QLabel#notice {{ color: {p.warning}; }}
QLabel#dim {{ color: {p.text_dim}; }}
QLabel#pane_title {{ font-weight: 600; }}
QGroupBox {{ font-weight: 600; border: 1px solid {p.border}; border-radius: 8px; margin-top: 10px;
    padding-top: 6px; }}
QGroupBox::title {{ subcontrol-origin: margin; left: 10px; padding: 0 4px; color: {p.text_dim}; }}
QToolTip {{ background: {p.surface_alt}; color: {p.text}; border: 1px solid {p.border}; padding: 4px; }}
"""


def apply(app, palette: Palette) -> None:
    """Fusion style, the palette and the style sheet, applied to the whole application."""
    from PySide6.QtWidgets import QToolTip

    app.setStyle("Fusion")
    app.setPalette(qpalette(palette))
    QToolTip.setPalette(qpalette(palette))
    app.setStyleSheet(stylesheet(palette))
