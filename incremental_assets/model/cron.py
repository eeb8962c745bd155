"""Cron expressions as a model's ``cron`` gives them: checked when the model loads, never first by the scheduler.

Five fields (minute, hour, day of month, month, day of week), each ``*``, a number or name, a range
``a-b``, a step ``*/n``, ``a-b/n`` or ``a/n``, or a comma list of these; month names ``jan``-``dec``,
weekday names ``sun``-``sat`` (0 and 7 are Sunday). SQLMesh's aliases ``@hourly``, ``@daily``
(``@midnight``), ``@weekly``, ``@monthly``, ``@yearly`` (``@annually``), and ``@quarterly``, stand for
their five-field form. As in cron, a day of month and a day of week both restricted means either.
An expression that can never fire (``0 0 31 2 *``: February has no 31st) is refused too.

>>> expand_cron("@daily"), expand_cron("*/15 9-17 * jan-mar mon-fri")
('0 0 * * *', '*/15 9-17 * jan-mar mon-fri')
>>> cron_problem("61 25 * * *")
'minute 61 is out of range 0-59'
>>> cron_problem("0 0 31 2 *")
'it never fires: no month it names (feb) has a day 31'
>>> cron_problem("banana")
'a cron has 5 fields (minute hour day-of-month month day-of-week), this has 1'
"""

from __future__ import annotations

import re

ALIASES = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@quarterly": "0 0 1 */3 *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}

CRON_HINT = (
    "write five fields, minute hour day-of-month month day-of-week, e.g. cron '0 6 * * *' (06:00 every day), "
    "or @hourly, @daily, @weekly, @monthly, @yearly"
)

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# (what the field is, lowest, highest, names for lowest..)
_FIELDS = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _WEEKDAYS),
)
_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # February's 29th fires in leap years
_ITEM = re.compile(r"(?P<range>\*|[a-z0-9]+(?:-[a-z0-9]+)?)(?:/(?P<step>[a-z0-9]+))?")


class CronError(ValueError):
    """Why a cron expression is refused, in the user's words."""


def expand_cron(cron: str) -> str:
    """The five-field form of a valid cron (its alias expanded); raise :class:`CronError` otherwise."""
    text = " ".join(cron.strip().lower().split())
    text = ALIASES.get(text, text)
    if text.startswith("@"):
        raise CronError(f"unknown cron alias '{cron.strip()}'; the aliases are {', '.join(ALIASES)}")
    fields = text.split(" ") if text else []
    if len(fields) != 5:
        raise CronError(f"a cron has 5 fields (minute hour day-of-month month day-of-week), this has {len(fields)}")
    values = [_field_values(f, *spec) for f, spec in zip(fields, _FIELDS)]
    _check_fires(values)
    return text


def cron_problem(cron: str) -> str | None:
    """What is wrong with a cron expression, or None when it is valid."""
    try:
        expand_cron(cron)
    except CronError as exc:
        return str(exc)
    return None


def _number(text: str, what: str, low: int, high: int, names: tuple[str, ...]) -> int:
    if text in names:
        return names.index(text) + low
    if not text.isdigit():
        named = f"; or a name {names[0]}-{names[-1]}" if names else ""
        raise CronError(f"{what} '{text}' is not a number {low}-{high}{named}")
    value = int(text)
    if not low <= value <= high:
        raise CronError(f"{what} {value} is out of range {low}-{high}")
    return value


def _field_values(field: str, what: str, low: int, high: int, names: tuple[str, ...]) -> set[int]:
    """The values one field names."""
    out: set[int] = set()
    for item in field.split(","):
        match = _ITEM.fullmatch(item)
        if match is None:
            raise CronError(f"{what} '{item}' is not a number, a name, a range a-b or a step */n")
        part, step_text = match.group("range"), match.group("step")
        if part == "*":
            first, last = low, high
        elif "-" in part:
            first, last = (_number(p, what, low, high, names) for p in part.split("-"))
            if first > last:
                raise CronError(f"{what} range '{part}' runs backwards")
        else:
            first = last = _number(part, what, low, high, names)
            if step_text is not None:
                last = high  # `a/n`: from a to the end of the field, every n
        step = 1
        if step_text is not None:
            if not step_text.isdigit() or int(step_text) < 1:
                raise CronError(f"{what} step '/{step_text}' must be a whole number of at least 1")
            step = int(step_text)
        out.update(range(first, last + 1, step))
    return out


def _check_fires(values: list[set[int]]) -> None:
    """Refuse days of month that no named month has (Dagster refuses them even beside a day of week)."""
    days, months, weekdays = values[2], values[3], values[4] | ({0} if 7 in values[4] else set())
    if not any(day <= _DAYS_IN_MONTH[m - 1] for m in months for day in days):
        named = ", ".join(_MONTHS[m - 1] for m in sorted(months))
        never = "it never fires: " if weekdays >= set(range(7)) else ""
        raise CronError(f"{never}no month it names ({named}) has a day {min(days)}")
