"""torch.utils.benchmark.Compare: Measurements as text tables, one per label, a row per (num_threads, env,
sub_label or stmt) grouped under a "N threads:" rule, a column per description, the median of each cell in the
table's unit. Replicates of one task are merged first (Measurement.merge). Optional: digits trimmed to each
measurement's significant figures, ANSI colours against the best cell of a column or row, and the IQR of noisy
cells. The layout is torch's character for character."""
import collections
import enum
import itertools
import math

from . import common

__all__ = ["Colorize", "Compare"]

BEST = "\033[92m"
GOOD = "\033[34m"
BAD = "\033[2m\033[91m"
VERY_BAD = "\033[31m"
BOLD = "\033[1m"
TERMINATE = "\033[0m"


class Colorize(enum.Enum):
    NONE = "none"
    COLUMNWISE = "columnwise"
    ROWWISE = "rowwise"


def _leading_digits(x):
    return int(math.ceil(common._log10(x)))


class _Column:
    """One description's cells over every row group, and the number format they share."""

    def __init__(self, grouped_results, time_scale, time_unit, trim_significant_figures, highlight_warnings):
        self._grouped_results = grouped_results
        flat = list(itertools.chain.from_iterable(grouped_results))
        self._trim = trim_significant_figures
        self._highlight = highlight_warnings and any(r.has_warnings for r in flat if r)
        digits = [_leading_digits(r.median / time_scale) if r else None for r in flat]
        integer = max(d for d in digits if d is not None)
        if trim_significant_figures:
            decimals = min(max(m.significant_figures - d, 0) for d, m in zip(digits, flat)
                           if m is not None and d is not None)
        else:
            decimals = 1
        width = integer + decimals + (1 if decimals else 0)
        self._template = "{:>%d.%df}{:>%d}" % (width, decimals, 7 if self._highlight else 0)

    def get_results_for(self, group):
        return self._grouped_results[group]

    def num_to_str(self, value, estimated_sigfigs, spread):
        if value is None:
            return " " * len(self.num_to_str(1, estimated_sigfigs, None))
        if self._trim:
            value = common.trim_sigfig(value, estimated_sigfigs)
        note = " (! %.0f%%)" % (spread * 100) if self._highlight and spread is not None else ""
        return self._template.format(value, note)


def optional_min(seq):
    values = list(seq)
    return min(values) if values else None


class _Row:
    def __init__(self, results, row_group, render_env, env_str_len, row_name_str_len, time_scale, colorize,
                 num_threads=None):
        self._results = results
        self._row_group = row_group
        self._render_env = render_env
        self._env_str_len = env_str_len
        self._row_name_str_len = row_name_str_len
        self._time_scale = time_scale
        self._colorize = colorize
        self._columns = ()
        self._num_threads = num_threads

    def register_columns(self, columns):
        self._columns = columns

    def as_column_strings(self):
        first = next(r for r in self._results if r is not None)
        env = ("(%s)" % first.env if self._render_env else "").ljust(self._env_str_len + 4)
        cells = ["  " + env + first.as_row_name]
        for m, column in zip(self._results, self._columns):
            if m is None:
                cells.append(column.num_to_str(None, 1, None))
            else:
                cells.append(column.num_to_str(m.median / self._time_scale, m.significant_figures,
                                               m.iqr / m.median if m.has_warnings else None))
        return cells

    @staticmethod
    def color_segment(segment, value, best_value):
        if value <= best_value * 1.01 or value <= best_value + 100e-9:
            return BEST + BOLD + segment + TERMINATE * 2
        if value <= best_value * 1.1:
            return GOOD + BOLD + segment + TERMINATE * 2
        if value >= best_value * 5:
            return VERY_BAD + BOLD + segment + TERMINATE * 2
        if value >= best_value * 2:
            return BAD + segment + TERMINATE * 2
        return segment

    def row_separator(self, overall_width):
        if self._num_threads is None:
            return []
        return [("%s threads: " % self._num_threads).ljust(overall_width, "-")]

    def finalize_column_strings(self, column_strings, col_widths):
        best = [-1] * len(column_strings)
        if self._colorize == Colorize.ROWWISE:
            best = [min(r.median for r in self._results if r is not None)] * len(column_strings)
        elif self._colorize == Colorize.COLUMNWISE:
            best = [optional_min(r.median for r in column.get_results_for(self._row_group) if r is not None)
                    for column in self._columns]
        out = [column_strings[0].ljust(col_widths[0])]
        for text, width, result, best_value in zip(column_strings[1:], col_widths[1:], self._results, best):
            text = text.center(width)
            if self._colorize != Colorize.NONE and result is not None and best_value is not None:
                text = self.color_segment(text, result.median, best_value)
            out.append(text)
        return out


class Table:
    """The table of one label's (merged) results."""

    def __init__(self, results, colorize, trim_significant_figures, highlight_warnings):
        if len({r.label for r in results}) != 1:
            raise AssertionError("All results must share the same label")
        self.results = results
        self._colorize = colorize
        self._trim_significant_figures = trim_significant_figures
        self._highlight_warnings = highlight_warnings
        self.label = results[0].label
        self.time_unit, self.time_scale = common.select_unit(min(r.median for r in results))
        self.row_keys = common.ordered_unique([self.row_fn(r) for r in results])
        # sorted by thread count and env only (a stable sort): rows keep the order their stmts came in
        self.row_keys.sort(key=lambda key: key[:2])
        self.column_keys = common.ordered_unique([self.col_fn(r) for r in results])
        self.rows, self.columns = self.populate_rows_and_columns()

    @staticmethod
    def row_fn(m):
        return m.num_threads, m.env, m.as_row_name

    @staticmethod
    def col_fn(m):
        return m.description

    def populate_rows_and_columns(self):
        cells = [[None] * len(self.column_keys) for _ in self.row_keys]
        row_at = {key: i for i, key in enumerate(self.row_keys)}
        col_at = {key: j for j, key in enumerate(self.column_keys)}
        for r in self.results:
            cells[row_at[self.row_fn(r)]][col_at[self.col_fn(r)]] = r
        envs = {r.env for r in self.results}
        render_env = len(envs) > 1
        env_str_len = max(len(e) for e in envs) if render_env else 0
        row_name_str_len = max(len(r.as_row_name) for r in self.results)
        rows, groups = [], []
        prior_threads, prior_env, group = -1, "", -1
        for (num_threads, env, _), row in zip(self.row_keys, cells):
            new_group = num_threads != prior_threads
            if new_group:
                prior_threads, prior_env = num_threads, ""
                group += 1
                groups.append([])
            rows.append(_Row(results=row, row_group=group, render_env=render_env and env != prior_env,
                             env_str_len=env_str_len, row_name_str_len=row_name_str_len,
                             time_scale=self.time_scale, colorize=self._colorize,
                             num_threads=num_threads if new_group else None))
            groups[-1].append(row)
            prior_env = env
        columns = tuple(_Column(grouped_results=[tuple(row[j] for row in g) for g in groups],
                                time_scale=self.time_scale, time_unit=self.time_unit,
                                trim_significant_figures=self._trim_significant_figures,
                                highlight_warnings=self._highlight_warnings)
                        for j in range(len(self.column_keys)))
        rows = tuple(rows)
        for row in rows:
            row.register_columns(columns)
        return rows, columns

    def render(self):
        string_rows = [[""] + self.column_keys]
        string_rows += [row.as_column_strings() for row in self.rows]
        n_cols = max(len(r) for r in string_rows)
        for r in string_rows:
            r.extend([""] * (n_cols - len(r)))
        widths = [max(len(cell) for cell in column) for column in zip(*string_rows)]
        lines = ["  |  ".join(cell.center(w) for cell, w in zip(string_rows[0], widths))]
        overall = len(lines[0])
        for strings, row in zip(string_rows[1:], self.rows):
            lines.extend(row.row_separator(overall))
            lines.append("  |  ".join(row.finalize_column_strings(strings, widths)))
        noisy = self._highlight_warnings and any(r.has_warnings for r in self.results)
        title = (" " + (self.label or "") + " ").center(overall - 2, "-")
        return ("[%s]\n%s\n\nTimes are in %ss (%s).\n%s" % (
            title, "\n".join(lines), common.unit_to_english(self.time_unit), self.time_unit,
            "(! XX%) Measurement has high variance, where XX is the IQR / median * 100.\n" if noisy else ""))


class Compare:
    """Tables of Measurements: str(compare) or compare.print(); trim_significant_figures(), colorize(rowwise)
    and highlight_warnings() change how later renders look."""

    def __init__(self, results):
        self._results = []
        self.extend_results(results)
        self._trim_significant_figures = False
        self._colorize = Colorize.NONE
        self._highlight_warnings = False

    def __str__(self):
        return "\n".join(self._render())

    def extend_results(self, results):
        """Adds Measurements (anything else raises, and nothing is added)."""
        for r in results:
            if not isinstance(r, common.Measurement):
                raise ValueError("Expected an instance of `Measurement`, got %s instead." % type(r))
        self._results.extend(results)

    def trim_significant_figures(self):
        self._trim_significant_figures = True

    def colorize(self, rowwise=False):
        """Colours each cell against the best of its column (of its thread group), or of its row."""
        self._colorize = Colorize.ROWWISE if rowwise else Colorize.COLUMNWISE

    def highlight_warnings(self):
        self._highlight_warnings = True

    def print(self):
        print(str(self))

    def _render(self):
        by_label = collections.defaultdict(list)
        for r in common.Measurement.merge(self._results):
            by_label[r.label].append(r)
        return [self._layout(group) for group in by_label.values()]

    def _layout(self, results):
        return Table(results, self._colorize, self._trim_significant_figures, self._highlight_warnings).render()
