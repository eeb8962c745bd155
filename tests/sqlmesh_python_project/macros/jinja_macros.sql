{% macro identity(y) %}{{ y }}{% endmacro %}
