"""A model whose rows come from a Python function in its file instead of a query over tables.

Two kinds of file declare one (:mod:`incremental_assets.load.python_models`): a source model's ``fetch``
(rows from an external system after the committed cursor) and a SQLMesh ``@model``'s ``execute`` (rows for a
run window, reading upstream models). Either way each run calls the function and registers what it returns as
the view :attr:`PythonModel.rows_view`, which the model's query reads, so kinds, intervals, audits and writes
work exactly as for SQL models. :mod:`incremental_assets.spark.python_models` calls it for a run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from incremental_assets.model.sql_model import SqlModel


@dataclass(frozen=True, eq=False)
class PythonModel(SqlModel):
    """A model whose rows come from the Python function :attr:`function_name` of its file."""

    source_text: str = ""  # the file's text: editing the function is a definition change

    # The user's function that gives the rows (``fetch``, ``execute``).
    function_name: ClassVar[str] = ""
    # The view the model's query reads the function's rows from.
    rows_view: ClassVar[str] = ""
    # Whether the function reads the project's tables (in a model test, the test's input rows feed it).
    reads_tables: ClassVar[bool] = False
