# _kernelhost.env: kernelhost's python kernel environment.
#
# Every python kernel gets it (the package's __init__.py says how): it
# teaches the kernel's IPython display formatter what the E2B SDKs read from
# a result:
#
#   e2b/chart         a matplotlib Figure as structured chart data (the SDK's
#                     LineChart, ScatterChart, BarChart, PieChart,
#                     BoxAndWhiskerChart, SuperChart), beside its image/png
#   e2b/data          a pandas DataFrame as {column: [values]}, beside its html
#   application/json  dicts and lists
#
# and makes PIL's Image.show() and Image.save(filename) and, on a kernel
# without IPython's shell, matplotlib's plt.show() display their image.
#
# Nothing here imports matplotlib, pandas, PIL or IPython: the formatters
# know their types by name, and what needs a module waits for its import
# (the package's import hook calls ON_IMPORT): the two show() patches, and
# the formatters of an IPython shell made later (the subprocess driver
# loads IPython only when a cell needs it).
# A missing package or a chart this code cannot read never breaks a cell:
# the chart is left out, the rest of the result stays. A patch that fails
# to apply is reported (the package's failed()).
#
# It adds a formatter only for a MIME type nobody handles yet, so E2B's own
# startup scripts, where a kernel has them, keep theirs.
import builtins
import json
import math
import re
import sys

CHART_MIME = "e2b/chart"
DATA_MIME = "e2b/data"


# --- matplotlib figure -> e2b/chart ------------------------------------------


def figure_chart(fig):
    """The chart of a Figure, as E2B's extractor gives it: {} for a figure
    with no data (text only, or no axes), one axes' chart, or a superchart of
    all its axes (a colorbar's and an empty twin's included)."""
    axes = fig.get_axes()
    if not any(ax.has_data() for ax in axes):
        return {}
    if len(axes) == 1:
        return axes_chart(axes[0])
    return {"type": "superchart", "title": _suptitle(fig), "elements": [axes_chart(ax) for ax in axes]}


def _suptitle(fig):
    text = fig.get_suptitle() if hasattr(fig, "get_suptitle") else getattr(fig, "_suptitle", None)
    if text is not None and not isinstance(text, str):
        text = text.get_text()
    return text or None


def _artists(ax):
    """What was drawn on the axes, in order, without its texts (titles,
    labels, annotations); legends and spines are not drawn on it."""
    from matplotlib.text import Text

    children = getattr(ax, "_children", None)
    if children is None:  # matplotlib before 3.5 kept them by kind
        children = ax.lines + ax.collections + ax.patches + ax.images + ax.tables + ax.artists
    return [a for a in children if not isinstance(a, Text)]


def _is_guide_line(line):
    """A two-point horizontal or vertical line (a grid line, an axhline): E2B
    leaves these out of a chart's elements and of its kind."""
    xy = line.get_xydata()
    return len(xy) == 2 and (xy[0][0] == xy[1][0] or xy[0][1] == xy[1][1])


def axes_chart(ax):
    """The chart of one Axes, by the kind of every artist on it, as E2B's
    extractor decides: lines only (markers only included, and no artist at
    all: an empty twin) make a line chart; boxes and lines a box and whisker
    chart; point collections only (guide lines aside) a scatter; wedges only
    a pie; rectangles only a bar chart; any mix an unknown chart."""
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import PathPatch, Rectangle, Wedge

    artists = _artists(ax)
    if all(isinstance(a, Line2D) for a in artists):
        # boxplot() without patch_artist draws its boxes as lines: E2B calls
        # that a line chart; we read the boxes (docs/python-results.md).
        boxes = _box_chart(ax) if artists else None
        if boxes is not None:
            return boxes
        lines = [line for line in ax.get_lines() if not _is_guide_line(line)]
        return _point_chart(ax, "line", lines, lambda line: line.get_xydata())
    if all(isinstance(a, (PathPatch, Line2D)) for a in artists):
        boxes = _box_chart(ax)
        return boxes if boxes is not None else _unknown_chart(ax)
    artists = [a for a in artists if not (isinstance(a, Line2D) and _is_guide_line(a))]
    if all(isinstance(a, PathCollection) for a in artists):
        return _point_chart(ax, "scatter", ax.collections, lambda c: c.get_offsets())
    if all(isinstance(a, Wedge) for a in artists):
        return _pie_chart(ax, [p for p in ax.patches if isinstance(p, Wedge)])
    if all(isinstance(a, Rectangle) for a in artists):
        from matplotlib.container import BarContainer

        return _bar_chart(ax, [c for c in ax.containers if isinstance(c, BarContainer)])
    return _unknown_chart(ax)


def _unknown_chart(ax):
    return {"type": "unknown", "title": _title(ax), "elements": []}


def _title(ax):
    return ax.get_title() or ax.get_title("left") or ax.get_title("right") or None


_UNIT = re.compile(r"\(([^()]*)\)\s*$")


def _labelled(ax, chart):
    """Add the axis labels, and the units a trailing "(unit)" in them names."""
    for name, label in (("x", ax.get_xlabel()), ("y", ax.get_ylabel())):
        unit = _UNIT.search(label)
        chart[name + "_label"] = label or None
        chart[name + "_unit"] = unit.group(1).strip() if unit else None
    return chart


def _series_label(artist):
    label = artist.get_label()
    # matplotlib names unlabelled artists "_child0", "_container1", ...
    return "" if not isinstance(label, str) or label.startswith("_") else label


def _is_datetime(axis):
    from matplotlib import dates

    return isinstance(axis.get_major_formatter(), (dates.DateFormatter, dates.AutoDateFormatter, dates.ConciseDateFormatter)) or isinstance(
        axis.get_major_locator(), dates.DateLocator
    )


def _is_categorical(axis):
    from matplotlib import category

    return isinstance(axis.get_units(), category.UnitData)


def _scale(axis):
    if _is_datetime(axis):
        return "datetime"
    if _is_categorical(axis):
        return "categorical"
    return axis.get_scale()


def _values(axis, scale, numbers):
    """Axis values as the chart shows them: ISO strings on a datetime axis,
    category names on a categorical one, numbers (null for NaN) elsewhere."""
    if scale == "datetime":
        return _iso_dates(numbers)
    if scale == "categorical":
        return axis.get_major_formatter().format_ticks(numbers)
    return _finite(numbers)


def _finite(numbers):
    values = numbers.tolist() if hasattr(numbers, "tolist") else [float(v) for v in numbers]
    # JSON has no NaN or infinity (the driver's json.dumps would write an
    # invalid token): a gap in a line becomes null.
    if not all(map(math.isfinite, values)):
        values = [v if math.isfinite(v) else None for v in values]
    return values


def _iso_dates(numbers):
    """matplotlib date numbers (days since its epoch) as ISO 8601 strings,
    vectorised with numpy: a 10,000-point line must stay cheap."""
    import numpy as np
    from matplotlib import dates

    days = np.asarray(numbers, dtype=float)
    finite = np.isfinite(days)
    micros = np.where(finite, np.round(days * 86400e6), 0).astype("int64")
    stamps = np.datetime64(dates.get_epoch(), "us") + micros.astype("timedelta64[us]")
    # Whole seconds unless the data has finer ones: "2024-01-01T00:00:00".
    unit = "s" if not (micros % 1000000).any() else "us"
    text = np.datetime_as_string(stamps, unit=unit).tolist()
    if not finite.all():
        text = [t if ok else None for t, ok in zip(text, finite.tolist())]
    return text


def _ticks(axis, scale):
    """The major ticks inside the view, and their labels as matplotlib formats them."""
    low, high = sorted(axis.get_view_interval())
    slack = (high - low) * 1e-9
    locs = [loc for loc in axis.get_majorticklocs() if low - slack <= loc <= high + slack]
    labels = axis.get_major_formatter().format_ticks(locs) if locs else []
    return _values(axis, scale, locs), [_plain(str(label)) for label in labels]


_MATHDEFAULT = re.compile(r"\\mathdefault\{(.*)\}")


def _plain(label):
    """A tick label without matplotlib's mathtext markup, as a reader sees
    it: "$\\mathdefault{10^{2}}$" (a log axis) -> "10^2"."""
    if len(label) < 2 or label[0] != "$" or label[-1] != "$":
        return label
    label = _MATHDEFAULT.sub(r"\1", label[1:-1])
    return label.replace("\\times", "\u00d7").replace("{", "").replace("}", "")


def _point_chart(ax, kind, artists, xy_of):
    chart = {"type": kind, "title": _title(ax)}
    _labelled(ax, chart)
    scales = {}
    for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
        scale = scales[name] = _scale(axis)
        chart[name + "_scale"] = scale
        chart[name + "_ticks"], chart[name + "_tick_labels"] = _ticks(axis, scale)
    numeric = scales["x"] not in _NAMED_SCALES and scales["y"] not in _NAMED_SCALES
    elements = []
    for artist in artists:
        xy = xy_of(artist)
        if numeric and _all_finite(xy):
            points = xy.tolist()  # in C: the cost of a long line is here
        else:
            xs = _values(ax.xaxis, scales["x"], xy[:, 0])
            ys = _values(ax.yaxis, scales["y"], xy[:, 1])
            points = list(map(list, zip(xs, ys)))
        elements.append({"label": _series_label(artist), "points": points})
    chart["elements"] = elements
    return chart


_NAMED_SCALES = ("datetime", "categorical")  # values shown as strings, not numbers


def _all_finite(array):
    import numpy as np

    return bool(np.isfinite(array).all())


def _position_label(axis, position):
    """The name of a position on an axis: its category, the label of the tick
    it sits on (grouped bars sit within half a tick of it), or the number."""
    if _is_categorical(axis):
        return axis.get_major_formatter().format_ticks([position])[0]
    locs = list(axis.get_majorticklocs())
    if locs:
        nearest = min(range(len(locs)), key=lambda i: abs(locs[i] - position))
        spacing = min((abs(b - a) for a, b in zip(locs, locs[1:])), default=float("inf"))
        if abs(locs[nearest] - position) < spacing / 2:
            label = axis.get_major_formatter().format_ticks(locs)[nearest]
            if label:
                return str(label)
    if _is_datetime(axis):
        return _iso_dates([position])[0]
    return "%g" % position


def _bar_chart(ax, containers):
    chart = {"type": "bar", "title": _title(ax)}
    _labelled(ax, chart)
    elements = []
    for container in containers:
        horizontal = getattr(container, "orientation", None) == "horizontal"
        axis = ax.yaxis if horizontal else ax.xaxis
        group = _series_label(container)
        for bar in container.patches:
            if horizontal:
                position, value = bar.get_y() + bar.get_height() / 2, bar.get_width()
            else:
                position, value = bar.get_x() + bar.get_width() / 2, bar.get_height()
            elements.append({"label": _position_label(axis, position), "value": _finite([value])[0], "group": group})
    chart["elements"] = elements
    return chart


def _pie_chart(ax, wedges):
    elements = []
    for wedge in wedges:
        # pie() computes in float32 (matplotlib 3.6, at least): an angle holds
        # 7 significant digits, the rest is noise (90% of a pie is
        # 323.99999141693115): the angle is given to those 7, as 324.0.
        angle = float("%.7g" % abs(wedge.theta2 - wedge.theta1))
        elements.append({"label": _series_label(wedge), "angle": angle, "radius": float(wedge.r)})
    return {"type": "pie", "title": _title(ax), "elements": elements}


def _tidy(value):
    """value without the float noise E2B's extractor rounds away in box plot
    values: the decimals are cut at the first run of three 9s, or of three 0s
    after a significant digit, and the number rounded there:
    4.749999999 -> 4.75, 0.30000000000000004 -> 0.3. Other values are kept
    as they are."""
    digits, _, exponent = str(value).lower().partition("e")
    if "." not in digits:
        return float(value)
    decimals = digits.split(".", 1)[1]
    significant = len(decimals) - len(decimals.lstrip("0"))
    runs = [i for i in (decimals.find("999"), decimals.find("000", significant)) if i >= 0]
    if not runs:
        return float(value)
    rounded = round(float(digits), min(runs) + 1)
    return float("%re%s" % (rounded, exponent)) if exponent else rounded


def _box_chart(ax):
    """A box and whisker chart if the axes holds boxplot()'s artists: boxes
    (closed rectangles, or patches with patch_artist=True) with a median line
    across and a whisker on each end; None otherwise."""
    from matplotlib.patches import PathPatch

    lines = [line for line in ax.get_lines() if line.get_visible()]
    shapes = [line.get_xydata() for line in lines]
    shapes += [p.get_path().vertices for p in ax.patches if isinstance(p, PathPatch)]
    boxes = [_rectangle(xy) for xy in shapes]
    boxes = [b for b in boxes if b is not None]
    if not boxes:
        return None
    segments = [xy for xy in (line.get_xydata() for line in lines) if len(xy) == 2]
    fliers = [line.get_xydata() for line in lines if line.get_linestyle() in ("None", " ", "") and len(line.get_xydata())]
    for vertical in (True, False):
        elements = [_box_element(ax, box, segments, fliers, vertical) for box in boxes]
        if elements and all(e is not None for e in elements):
            chart = {"type": "box_and_whisker", "title": _title(ax)}
            _labelled(ax, chart)
            chart["elements"] = elements
            return chart
    return None


def _rectangle(xy):
    """(x0, x1, y0, y1) if xy traces an axis-aligned rectangle, else None."""
    if len(xy) not in (5, 6):
        return None
    xs, ys = sorted(set(xy[:, 0].tolist())), sorted(set(xy[:, 1].tolist()))
    if len(xs) != 2 or len(ys) != 2 or tuple(xy[0]) != tuple(xy[4]):
        return None
    return xs[0], xs[1], ys[0], ys[1]


def _box_element(ax, box, segments, fliers, vertical):
    # Work in (across, along) coordinates: across the box's width, along its values.
    i, j = (0, 1) if vertical else (1, 0)
    lo_across, hi_across = box[0:2] if vertical else box[2:4]
    q1, q3 = box[2:4] if vertical else box[0:2]
    center = (lo_across + hi_across) / 2
    median = low = high = None
    for seg in segments:
        a0, a1, v0, v1 = seg[0][i], seg[1][i], seg[0][j], seg[1][j]
        if v0 == v1 and lo_across - 1e-9 <= min(a0, a1) and max(a0, a1) <= hi_across + 1e-9 and q1 <= v0 <= q3 and a0 != a1:
            if median is None:
                median = v0
        elif a0 == a1 and abs(a0 - center) < 1e-9 and v0 != v1:
            end = v1 if abs(v0 - q1) < 1e-9 or abs(v0 - q3) < 1e-9 else v0
            if end <= q1:
                low = end
            elif end >= q3:
                high = end
    if median is None or low is None or high is None:
        return None
    outliers = []
    for xy in fliers:
        if all(abs(v - center) < 1e-9 for v in xy[:, i].tolist()):
            outliers.extend(v if v is None else _tidy(v) for v in _finite(xy[:, j]))
    axis = ax.xaxis if vertical else ax.yaxis
    return {
        "label": _position_label(axis, center),
        "min": _tidy(low),
        "first_quartile": _tidy(q1),
        "median": _tidy(median),
        "third_quartile": _tidy(q3),
        "max": _tidy(high),
        "outliers": outliers,
    }


def _figure_png(fig):
    from io import BytesIO

    buf = BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


# --- pandas DataFrame -> e2b/data ---------------------------------------------


def dataframe_data(df):
    """A DataFrame as {column: [values]}, with the JSON pandas writes itself
    (dates as ISO strings, NaN as null)."""
    split = json.loads(df.to_json(orient="split", date_format="iso", default_handler=str))
    columns = [str(c) for c in split["columns"]]
    rows = split["data"]
    return {name: [row[k] for row in rows] for k, name in enumerate(columns)}


# --- dicts and lists -> application/json --------------------------------------


def json_value(obj):
    """obj as JSON, if it is plain JSON data; None (no application/json) otherwise."""
    try:
        return json.loads(json.dumps(obj, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        return None


# --- registration --------------------------------------------------------------


def _quietly(fn):
    """A formatter function that gives nothing, silently, where it fails: a
    chart this code cannot read must not cost the user their png or text."""

    def format_quietly(obj):
        try:
            return fn(obj)
        except Exception:
            return None

    format_quietly.__name__ = fn.__name__
    return format_quietly


def _display_formatter():
    """The kernel's DisplayFormatter and shell: the IPython shell's where there
    is one (ipykernel, a driver running cells in IPython), else the one the
    subprocess driver formats its results with (display.formatter), else
    none yet. IPython is not imported here: a driver that loads it only when
    a cell needs it keeps that; its shell gets the formatters when it is
    made (_patch_shell_class)."""
    # getattr: the import of IPython that loads this environment (see
    # the package's __init__.py) may not have defined get_ipython yet.
    get_ipython = getattr(sys.modules.get("IPython"), "get_ipython", None)
    shell = get_ipython() if get_ipython is not None else None
    if shell is not None:
        return shell.display_formatter, shell
    return getattr(getattr(builtins, "display", None), "formatter", None), None


def _add_formatter(display_formatter, mime, module, name, fn):
    """Add a formatter for a MIME type of E2B's, unless one is there already.

    It knows its type by name, so nothing is imported for it, and not as a
    registered printer: matplotlib's inline backend removes every
    formatter's printers for Figure when it sets up (select_figure_formats).
    Printers users register, and _repr_e2b_chart_/_repr_e2b_data_ methods,
    come first."""
    if mime in display_formatter.formatters:
        return
    from IPython.core.formatters import BaseFormatter
    from traitlets import ObjectName

    fn = _quietly(fn)
    method = "_repr_" + mime.replace("/", "_") + "_"

    class Formatter(BaseFormatter):
        format_type = mime
        print_method = ObjectName(method)
        _return_type = (dict,)

        def __call__(self, obj):
            # Every displayed value passes here: the common case (not ours,
            # nothing registered, no such method) must cost next to nothing.
            if _is_instance_by_name(obj, module, name):
                value = super().__call__(obj)
                return fn(obj) if value is None and self.enabled else value
            if self.type_printers or self.deferred_printers or getattr(type(obj), method, None) is not None:
                return super().__call__(obj)
            return None

    display_formatter.formatters[mime] = Formatter(parent=display_formatter)


def _is_instance_by_name(obj, module, name):
    return any(cls.__name__ == name and cls.__module__ == module for cls in type(obj).__mro__)


def _register(display_formatter):
    from IPython.core.formatters import JSONFormatter

    forms = display_formatter.formatters
    _add_formatter(display_formatter, CHART_MIME, "matplotlib.figure", "Figure", figure_chart)
    _add_formatter(display_formatter, DATA_MIME, "pandas.core.frame", "DataFrame", dataframe_data)
    png = forms.get("image/png")
    if png is not None and not _has_printer(png, "matplotlib.figure", "Figure"):
        # ipykernel's inline backend registers its own; a kernel on Agg has none.
        png.for_type_by_name("matplotlib.figure", "Figure", _quietly(_figure_png))
    json_formatter = forms.get("application/json")
    # Only IPython's own: a replaced one (E2B's) already handles dicts its way.
    if type(json_formatter) is JSONFormatter:
        for cls in (dict, list):
            if not _has_printer(json_formatter, "builtins", cls.__name__):
                json_formatter.for_type(cls, _quietly(json_value))


def _has_printer(formatter, module, name):
    if (module, name) in formatter.deferred_printers:
        return True
    cls = getattr(sys.modules.get(module), name, None)
    return cls is not None and cls in formatter.type_printers


# --- show() ----------------------------------------------------------------------


def _display(obj):
    from IPython.display import display

    display(obj)


def _patch_pil(image_module):
    """Image.show() displays the image (as png) instead of opening a viewer,
    and Image.save() to a file name displays the image it saves, as E2B's
    kernels do: so does a figure matplotlib saves to a file (its savefig()
    writes the png through PIL)."""
    image_class = image_module.Image
    if getattr(image_class.show, "_kernelhost", False):
        return

    def show(self, title=None, **options):
        _display(self)

    save = image_class.save

    def save_and_display(self, fp, format=None, **params):
        if isinstance(fp, str):  # a file name; not a path object or a buffer (E2B's rule)
            _display(self)
        return save(self, fp, format, **params)

    show._kernelhost = save_and_display._kernelhost = True
    save_and_display.__doc__ = save.__doc__
    image_class.show = show
    image_class.save = save_and_display


def _patch_pyplot(pyplot):
    """On a kernel with no IPython shell (the subprocess driver without it),
    and so no inline backend, plt.show() on Agg would only warn: make it
    display the open figures and close them, as the inline backend does."""
    _, shell = _display_formatter()
    if shell is not None or getattr(pyplot.show, "_kernelhost", False):
        return
    import matplotlib

    if matplotlib.get_backend().lower() != "agg":
        return

    def show(*args, **kwargs):
        try:
            for num in pyplot.get_fignums():
                _display(pyplot.figure(num))
        finally:
            pyplot.close("all")

    show._kernelhost = True
    pyplot.show = show


def _patch_shell_class(interactiveshell):
    """Every IPython shell made from now on gets the formatters as it sets up
    its display formatter: a driver that makes its shell only when a cell
    needs one (after this environment was applied) included."""
    shell_class = interactiveshell.InteractiveShell
    init = shell_class.init_display_formatter
    if getattr(init, "_kernelhost", False):
        return

    def init_display_formatter(self, *args, **kwargs):
        init(self, *args, **kwargs)
        try:
            _register(self.display_formatter)
        except Exception:
            _failed("registering the formatters of a new IPython shell")

    init_display_formatter._kernelhost = True
    shell_class.init_display_formatter = init_display_formatter


# The modules patched once they are imported: the package's import hook
# calls these (and its ENV_WATCHED lists the same names).
ON_IMPORT = {
    "PIL.Image": _patch_pil,
    "matplotlib.pyplot": _patch_pyplot,
    "IPython.core.interactiveshell": _patch_shell_class,
}


def install():
    display_formatter, _ = _display_formatter()
    if display_formatter is not None:
        _register(display_formatter)
    for name, patch in ON_IMPORT.items():
        if name in sys.modules:  # imported before us: by a startup script, or the import that loaded us
            try:
                patch(sys.modules[name])
            except Exception:
                _failed("patching " + name)


def _failed(what):
    """Report the exception being handled through the package (raise it
    where this module runs on its own, in a test)."""
    root = sys.modules.get(__package__ or "")
    if root is None:
        raise
    root.failed(what)


install()
