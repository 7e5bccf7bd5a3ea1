from . import document_translation  # noqa: F401
