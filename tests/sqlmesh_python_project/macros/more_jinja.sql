{% macro labelled(expr, name) %}{{ identity(expr) }} AS {{ name }}{% endmacro %}
