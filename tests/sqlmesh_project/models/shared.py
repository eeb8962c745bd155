"""Helpers the Python models import; this file defines no model."""


def size_label(quantity: int) -> str:
    return "large" if quantity >= 8 else "small"
