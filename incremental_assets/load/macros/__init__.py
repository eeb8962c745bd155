"""SQLMesh's macro language, from the text of a model file to the SQL of one run.

In the order a macro goes through them:

    syntax.py             ``@x``, ``@f(...)``, ``col_@x``, ``@{x}`` made parseable by every dialect, and back
    evaluator.py          ``MacroEvaluator``: variables, ``@DEF``, lambdas and macro calls expanded on the AST
    operators.py          SQLMesh's operators (``@EACH``, ``@IF``, ``@STAR`` ...) and calling Python macros
    relation_macros.py    ``@DATE_SPINE``, ``@DEDUPLICATE``, ``@RESOLVE_TEMPLATE``: macros that build or name a relation
    python_macros.py      a project's ``macros/*.py``: the ``@macro()`` functions its SQL calls
    window_conditions.py  conditions on the run window (``@IF(@start_ds > ...)``): every branch kept until a run
    render.py             per run: date macros as typed literals, pre/post statements, the window clamp

Expansion happens once, when a model is loaded, so every later stage sees the query a macro builds;
only the date macros wait for a run's window (:mod:`.render`, which the plan calls).
"""
