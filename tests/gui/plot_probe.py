"""Reads what the live graphs (gui.views.live.plots.LivePlots) draw: the data each curve and bar item was given
by setData / setOpts, as plain lists, so a test checks the figures the user sees."""


def _curve(item) -> tuple[list[float], list[float]]:
    x, y = item.getData()
    return ([] if x is None else list(map(float, x)), [] if y is None else list(map(float, y)))


def _bars(item) -> tuple[list[float], list[float]]:
    return (list(map(float, item.opts.get("x", []))), list(map(float, item.opts.get("height", []))))


def plotted(plots) -> dict[str, tuple[list[float], list[float]]]:
    """What each of the graphs' items draws now: (x, y) of a curve, (x, height) of a bar graph."""
    return {
        "acceptance_rolling": _curve(plots.acceptance_rolling_curve),
        "acceptance_cumulative": _curve(plots.acceptance_cumulative_curve),
        "speed_rolling": _curve(plots.speed_rolling_curve),
        "speed_cumulative": _curve(plots.speed_cumulative_curve),
        "per_position": _bars(plots.position_bars),
        "histogram": _bars(plots.histogram_bars),
    }
