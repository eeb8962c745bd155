MODEL (name shop.labelled, kind FULL);

JINJA_QUERY_BEGIN;
SELECT {{ labelled('item', 'name') }}, {{ identity(1) }} AS one FROM shop.items
JINJA_END;
