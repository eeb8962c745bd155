from datetime import date, timedelta


def days(start, end):
    """The days of [start, end] (end inclusive, as SQLMesh passes it)."""
    day = start.date() if hasattr(start, "date") else start
    while day <= (end.date() if hasattr(end, "date") else end):
        yield day
        day += timedelta(days=1)
