"""torch.utils.benchmark.utils.compare for tessel: Compare lays Measurements out as text tables, character for
character as torch prints them (scripts and logs diff against torch's output).

One table per label. Rows are (num_threads, env, sub_label or stmt), banded under a "N threads:" rule; columns
are descriptions; a cell is the median in the table's unit. Replicates of one task are pooled first
(Measurement.merge). Options: digits cut to what each measurement's noise supports, the IQR of noisy cells, and
ANSI colours ranking each cell against the best of its column (within its band) or of its row.
"""
import enum
import math

from . import common

__all__ = ["Colorize", "Compare"]


class Colorize(enum.Enum):
    NONE = "none"
    COLUMNWISE = "columnwise"
    ROWWISE = "rowwise"


_RESET_TWICE = "\033[0m" * 2
_NOISE_FOOTNOTE = "(! XX%) Measurement has high variance, where XX is the IQR / median * 100.\n"
_CELL_SEPARATOR = "  |  "


def _shade(text, seconds, best):
    """text coloured by how `seconds` compares with the best time it is ranked against. Within 1% (or 100 ns)
    counts as best: differences that small are noise."""
    if seconds <= best * 1.01 or seconds <= best + 1e-7:
        style = "\033[92m\033[1m"  # bright green, bold
    elif seconds <= best * 1.1:
        style = "\033[34m\033[1m"  # blue, bold
    elif seconds >= best * 5:
        style = "\033[31m\033[1m"  # red, bold
    elif seconds >= best * 2:
        style = "\033[2m\033[91m"  # dim bright red
    else:
        return text
    return style + text + _RESET_TWICE


class _NumberFormat:
    """How one column writes its numbers, shared by every band so the column stays aligned: enough integer digits
    for its largest cell; one decimal, or when trimming, as many as its least precise cell supports; room for an
    IQR note when the column has a noisy cell and notes are wanted."""

    def __init__(self, cells, scale, trim, flag_noise):
        present = [m for m in cells if m is not None]
        self._room = 7 if flag_noise and any(m.has_warnings for m in present) else 0
        whole = [math.ceil(common._decade(m.median / scale)) for m in present]
        self._decimals = 1
        if trim:
            self._decimals = min(max(m.significant_figures - digits, 0) for m, digits in zip(present, whole))
        self._width = max(whole) + self._decimals + (1 if self._decimals else 0)
        self._trim = trim
        self._scale = scale

    def _number(self, value, sigfigs, spread):
        if self._trim:
            value = common.trim_sigfig(value, sigfigs)
        note = " (! %.0f%%)" % (spread * 100) if self._room and spread is not None else ""
        return "%*.*f%s" % (self._width, self._decimals, value, note.rjust(self._room))

    def cell(self, m):
        if m is None:
            # an empty cell is as wide as a one written with one significant figure
            return " " * len(self._number(1, 1, None))
        spread = m.iqr / m.median if m.has_warnings else None
        return self._number(m.median / self._scale, m.significant_figures, spread)


def _row_key(m):
    return m.num_threads, m.env, m.as_row_name


class _Table:
    """The table of one label's (pooled) measurements."""

    def __init__(self, measurements, colorize, trim, flag_noise):
        self._label = measurements[0].label
        self._coloring = colorize
        self._unit, scale = common.select_unit(min(m.median for m in measurements))
        row_keys = common.ordered_unique([_row_key(m) for m in measurements])
        # by thread count, then env; the sort is stable, so rows keep the order their tasks arrived in
        row_keys.sort(key=lambda key: (key[0], key[1]))
        self._descriptions = common.ordered_unique([m.description for m in measurements])
        slot = {}
        for m in measurements:
            slot[_row_key(m), m.description] = m  # two tasks on one cell: the later is shown
        self._grid = [[slot.get((key, d)) for d in self._descriptions] for key in row_keys]
        self._bands = []  # (num_threads, indices of its rows)
        for i, key in enumerate(row_keys):
            if not self._bands or self._bands[-1][0] != key[0]:
                self._bands.append((key[0], []))
            self._bands[-1][1].append(i)
        self._row_labels = self._label_rows(row_keys, {m.env for m in measurements})
        self._formats = [_NumberFormat([row[j] for row in self._grid], scale, trim, flag_noise)
                         for j in range(len(self._descriptions))]
        self._footnote = _NOISE_FOOTNOTE if flag_noise and any(m.has_warnings for m in measurements) else ""

    def _label_rows(self, row_keys, envs):
        """The first cell of each row. Envs are shown only when the table has several, and then only where the
        env changes within a band."""
        show_envs = len(envs) > 1
        env_width = max(len(env) for env in envs) if show_envs else 0
        labels = [None] * len(row_keys)
        for _, members in self._bands:
            previous = ""
            for i in members:
                _, env, name = row_keys[i]
                shown = "(%s)" % env if show_envs and env != previous else ""
                labels[i] = "  " + shown.ljust(env_width + 4) + name
                previous = env
        return labels

    def _best(self, i, j, band):
        """The time cell (i, j) is ranked against: the fastest of its row, or of its column within its band."""
        if self._coloring is Colorize.ROWWISE:
            candidates = self._grid[i]
        else:
            candidates = [self._grid[k][j] for k in band]
        return min(m.median for m in candidates if m is not None)

    def render(self):
        header = [""] + self._descriptions
        texts = [[label] + [fmt.cell(m) for fmt, m in zip(self._formats, row)]
                 for label, row in zip(self._row_labels, self._grid)]
        widths = [max(len(line[j]) for line in [header] + texts) for j in range(len(header))]
        top = _CELL_SEPARATOR.join(text.center(width) for text, width in zip(header, widths))
        lines = [top]
        for threads, members in self._bands:
            if threads is not None:  # torch draws no rule over a band of num_threads=None
                lines.append(("%s threads: " % threads).ljust(len(top), "-"))
            for i in members:
                cells = [texts[i][0].ljust(widths[0])]
                for j, m in enumerate(self._grid[i]):
                    text = texts[i][j + 1].center(widths[j + 1])
                    if self._coloring is not Colorize.NONE and m is not None:
                        text = _shade(text, m.median, self._best(i, j, members))
                    cells.append(text)
                lines.append(_CELL_SEPARATOR.join(cells))
        title = (" %s " % (self._label or "")).center(len(top) - 2, "-")
        return "[%s]\n%s\n\nTimes are in %ss (%s).\n%s" % (
            title, "\n".join(lines), common.unit_to_english(self._unit), self._unit, self._footnote)


class Compare:
    """Measurements as tables: str(compare) or compare.print(). trim_significant_figures(), highlight_warnings()
    and colorize() change every later rendering."""

    def __init__(self, results):
        self._measurements = []
        self.extend_results(results)
        self._trim = False
        self._flag_noise = False
        self._coloring = Colorize.NONE

    def __str__(self):
        return "\n".join(self._tables())

    def extend_results(self, results):
        """Adds Measurements; anything else raises before any is added. `results` is walked twice, as torch walks
        it, so a generator is used up by the check and adds nothing (as in torch)."""
        for r in results:
            if not isinstance(r, common.Measurement):
                raise ValueError("Expected an instance of `Measurement`, got %s instead." % type(r))
        self._measurements.extend(results)

    def trim_significant_figures(self):
        self._trim = True

    def colorize(self, rowwise=False):
        """Colours cells against the best of their column within their thread band, or of their row."""
        self._coloring = Colorize.ROWWISE if rowwise else Colorize.COLUMNWISE

    def highlight_warnings(self):
        self._flag_noise = True

    def print(self):
        print(str(self))

    def _tables(self):
        by_label = {}
        for m in common.Measurement.merge(self._measurements):
            by_label.setdefault(m.label, []).append(m)
        return [_Table(group, self._coloring, self._trim, self._flag_noise).render() for group in by_label.values()]
