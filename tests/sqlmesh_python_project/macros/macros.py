from macros.limits import LOWEST_PRICE  # a sibling module of the macros package

from sqlmesh import macro


@macro()
def lowest_price(evaluator):
    return LOWEST_PRICE


@macro()
def in_window(evaluator, column):
    return column.between(evaluator.locals["start_ds"], evaluator.locals["end_ds"])


@macro()
def noop(evaluator):
    return "SELECT 1"
